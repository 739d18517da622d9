package oci

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"

	"github.com/tollgate-dev/tollgate/internal/redact"
)

// Scheme is the URI scheme of modules stored in an OCI registry.
const Scheme = "registry://"

// DefaultTag is used when a reference has neither a tag nor a digest.
const DefaultTag = "latest"

// Reference is a parsed registry:// module URI.
type Reference struct {
	// Registry is host[:port], e.g. "ghcr.io" or "127.0.0.1:5000".
	Registry string
	// Repository is the path inside the registry, e.g. "kubewarden/policies/pod-privileged".
	Repository string
	// Tag is the tag, "" when the URI only has a digest.
	Tag string
	// Digest is the manifest digest ("sha256:<64 hex>"), "" when the URI has only a tag.
	Digest string
}

// ParseURI parses registry://host[:port]/repo[:tag][@sha256:HEX]. Without a
// tag or digest the tag is "latest"; with both, the digest decides what is
// fetched and the tag is kept for display.
//
// Credentials do not go in the URI (they come from the Docker config): a
// userinfo ("registry://user:pw@host/...") is refused, and errors show the
// URI with its credentials masked (internal/redact).
func ParseURI(uri string) (Reference, error) {
	shown := redact.URI(uri)
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return Reference{}, fmt.Errorf("%w: %q has no scheme: want registry://host/repository:tag", ErrUnknownScheme, shown)
	}
	if scheme != "registry" {
		return Reference{}, fmt.Errorf("%w: %q: scheme %q is not registry://", ErrUnknownScheme, shown, scheme+"://")
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s", ErrMalformedReference, shown, fmt.Sprintf(format, args...))
	}
	if rest == "" {
		return Reference{}, bad("empty reference after registry://")
	}
	if host, _, _ := strings.Cut(rest, "/"); strings.Contains(host, "@") {
		return Reference{}, bad("credentials in a registry:// URI are not supported: put them in the Docker config.json (docker login, --docker-config-json-path)")
	}
	if strings.ContainsAny(rest, " \t\r\n?#") {
		return Reference{}, bad("contains whitespace, '?' or '#'")
	}
	host, path, ok := strings.Cut(rest, "/")
	if !ok || path == "" {
		return Reference{}, bad("missing repository: want registry://host[:port]/repository[:tag]")
	}
	if host == "" {
		return Reference{}, bad("empty registry host")
	}
	var ref Reference
	ref.Registry = host
	if name, dgst, found := strings.Cut(path, "@"); found {
		path = name
		if !strings.HasPrefix(dgst, "sha256:") {
			return Reference{}, bad("digest %q must start with sha256:", dgst)
		}
		if _, err := digest.Parse(dgst); err != nil {
			return Reference{}, bad("digest %q is not sha256 followed by 64 lower-case hex digits", dgst)
		}
		ref.Digest = dgst
	}
	// The tag is after the last ':' of the last path component (a ':' in the
	// host is a port and was cut off above).
	if i := strings.LastIndexByte(path, ':'); i >= 0 && !strings.Contains(path[i:], "/") {
		ref.Tag = path[i+1:]
		path = path[:i]
		if ref.Tag == "" {
			return Reference{}, bad("empty tag after ':'")
		}
	}
	ref.Repository = path
	if ref.Tag == "" && ref.Digest == "" {
		ref.Tag = DefaultTag
	}
	r := registry.Reference{Registry: ref.Registry, Repository: ref.Repository}
	if err := r.ValidateRegistry(); err != nil {
		return Reference{}, bad("invalid registry host %q", ref.Registry)
	}
	if err := r.ValidateRepository(); err != nil {
		return Reference{}, bad("invalid repository %q: want lower-case path components of [a-z0-9._-]", ref.Repository)
	}
	if ref.Tag != "" {
		r.Reference = ref.Tag
		if err := r.ValidateReferenceAsTag(); err != nil {
			return Reference{}, bad("invalid tag %q: want [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", ref.Tag)
		}
	}
	return ref, nil
}

// Name is the reference without the scheme, as registries and the store name
// it: host/repo:tag, host/repo@digest or host/repo:tag@digest.
func (r Reference) Name() string {
	s := r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// String is the registry:// URI.
func (r Reference) String() string { return Scheme + r.Name() }

// target is what is asked of the registry: the digest when pinned, else the tag.
func (r Reference) target() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

// IsRegistryURI reports whether uri uses the registry:// scheme.
func IsRegistryURI(uri string) bool { return strings.HasPrefix(uri, Scheme) }
