package module

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redact"
)

var (
	// ErrUnknownScheme: the URI's scheme is not one tollgate can load from.
	ErrUnknownScheme = errors.New("unknown module URI scheme")
	// ErrFetch: the module could not be fetched.
	ErrFetch = errors.New("cannot fetch module")
	// ErrTooLarge: the module is larger than the limit.
	ErrTooLarge = errors.New("module too large")
)

// RegistryFetcher fetches registry:// modules (implemented by host/oci).
type RegistryFetcher interface {
	Fetch(ctx context.Context, uri string) (wasm []byte, digest string, err error)
}

// BuiltinFunc returns the bytes of a built-in module by name.
type BuiltinFunc func(name string) ([]byte, error)

// Resolver fetches modules. The zero value reads paths and file:// URIs and
// fetches https:// with a default client.
type Resolver struct {
	// HTTPClient is used for https:// (and http:// when AllowHTTP). Nil means a
	// client with a 60 s timeout and proxies from the environment.
	HTTPClient *http.Client
	// AllowHTTP permits plain http:// URIs.
	AllowHTTP bool
	// Registry handles registry:// URIs. Nil makes them an error.
	Registry RegistryFetcher
	// Builtin handles builtin:// URIs. Nil makes them an error.
	Builtin BuiltinFunc
	// BuiltinDigest gives the digest of a built-in module without hashing
	// it (Module.Digest), "" when it does not know it. Nil: none is known.
	BuiltinDigest func(name string) (string, error)
	// MaxBytes caps a module's size (0 means 512 MiB).
	MaxBytes int64
}

// DefaultMaxBytes is the module size limit when Resolver.MaxBytes is 0.
const DefaultMaxBytes = 512 << 20

// Module is a fetched module.
type Module struct {
	URI  string
	Wasm []byte
	// ManifestDigest is the registry manifest digest for registry:// modules, empty otherwise.
	ManifestDigest string
	// Digest is the sha256 digest of Wasm ("sha256:<hex>") when the resolver
	// knows it without hashing the bytes (built-in modules, see
	// Resolver.BuiltinDigest), empty otherwise.
	Digest string
}

// Resolve fetches the module named by uri. Its errors show uri, and any
// URI a fetch met (a redirect), with their credentials masked
// (internal/redact): they end up in logs, GET /policies and kubectl.
func (r *Resolver) Resolve(ctx context.Context, uri string) (*Module, error) {
	m, err := r.resolve(ctx, uri)
	if err != nil {
		return nil, redact.Error(err, uri)
	}
	return m, nil
}

func (r *Resolver) resolve(ctx context.Context, uri string) (*Module, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return r.file(uri, uri)
	}
	switch scheme {
	case "file":
		u, err := url.Parse(uri)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrFetch, uri, err)
		}
		return r.file(uri, u.Path)
	case "https":
		return r.http(ctx, uri)
	case "http":
		if !r.AllowHTTP {
			return nil, fmt.Errorf("%w %q: plain http:// is not allowed (list the host in sources.yml insecure_sources)", ErrFetch, uri)
		}
		return r.http(ctx, uri)
	case "builtin":
		if r.Builtin == nil {
			return nil, fmt.Errorf("%w %q: no built-in modules are available", ErrFetch, uri)
		}
		name := strings.TrimSuffix(rest, "/")
		b, err := r.Builtin(name)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrFetch, uri, err)
		}
		m := &Module{URI: uri, Wasm: b}
		if r.BuiltinDigest != nil {
			if d, err := r.BuiltinDigest(name); err == nil {
				m.Digest = d
			}
		}
		return m, nil
	case "registry":
		if r.Registry == nil {
			return nil, fmt.Errorf("%w %q: registry:// modules are not supported by this build", ErrFetch, uri)
		}
		b, d, err := r.Registry.Fetch(ctx, uri)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrFetch, uri, err)
		}
		return &Module{URI: uri, Wasm: b, ManifestDigest: d}, nil
	default:
		return nil, fmt.Errorf("%w %q in %q (want a path, file://, https://, http://, registry:// or builtin://)", ErrUnknownScheme, scheme, uri)
	}
}

func (r *Resolver) limit() int64 {
	if r.MaxBytes > 0 {
		return r.MaxBytes
	}
	return DefaultMaxBytes
}

func (r *Resolver) file(uri, path string) (*Module, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrFetch, uri, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%w %q: is a directory", ErrFetch, uri)
	}
	if st.Size() > r.limit() {
		return nil, fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrTooLarge, uri, st.Size(), r.limit())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrFetch, uri, err)
	}
	return &Module{URI: uri, Wasm: b}, nil
}

func (r *Resolver) http(ctx context.Context, uri string) (*Module, error) {
	c := r.HTTPClient
	if c == nil {
		c = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrFetch, uri, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrFetch, uri, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %q: HTTP %s", ErrFetch, uri, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, r.limit()+1))
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrFetch, uri, err)
	}
	if int64(len(b)) > r.limit() {
		return nil, fmt.Errorf("%w: %q is larger than the limit of %d bytes", ErrTooLarge, uri, r.limit())
	}
	return &Module{URI: uri, Wasm: b}, nil
}
