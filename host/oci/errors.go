package oci

import "errors"

// Sentinel errors. Every error returned by this package wraps one of these
// (test with errors.Is) together with the URI, host or value at fault.
var (
	// ErrUnknownScheme: the URI does not start with registry://.
	ErrUnknownScheme = errors.New("unknown module URI scheme")
	// ErrMalformedReference: the part after registry:// is not host/repo[:tag][@digest].
	ErrMalformedReference = errors.New("malformed registry reference")
	// ErrNotFound: the registry has no such repository, tag or digest.
	ErrNotFound = errors.New("not found in registry")
	// ErrUnauthorized: the registry refused the credentials (or needs some).
	ErrUnauthorized = errors.New("registry authentication failed")
	// ErrUnreachable: the registry could not be reached (DNS, connect,
	// TLS handshake or response timeout).
	ErrUnreachable = errors.New("registry unreachable")
	// ErrUntrustedCertificate: the registry's TLS certificate is not trusted.
	ErrUntrustedCertificate = errors.New("registry TLS certificate not trusted")
	// ErrNotWasm: the artifact is not a single-layer Wasm module.
	ErrNotWasm = errors.New("artifact is not a Wasm module")
	// ErrTooLarge: a blob is larger than the configured limit.
	ErrTooLarge = errors.New("blob larger than the configured limit")
	// ErrDigestMismatch: content does not match its digest.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrIncomplete: a download ended before all announced bytes arrived.
	ErrIncomplete = errors.New("incomplete download")
	// ErrUnannotated: push of a module without Kubewarden metadata, without Force.
	ErrUnannotated = errors.New("module has no io.kubewarden.metadata section")
	// ErrInvalidModule: the bytes to push are not a Wasm module.
	ErrInvalidModule = errors.New("not a WebAssembly module")
	// ErrNotInStore: the URI or digest is not in the local store.
	ErrNotInStore = errors.New("not in the local store")
	// ErrInvalidSources: sources.yml cannot be read or is invalid.
	ErrInvalidSources = errors.New("invalid sources file")
	// ErrInvalidBundle: a bundle tarball is malformed.
	ErrInvalidBundle = errors.New("invalid bundle")
)
