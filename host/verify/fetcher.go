package verify

import (
	"context"
	"errors"
	"fmt"
)

// ModuleFetcher fetches a registry:// module's Wasm and manifest digest
// (host/oci's Client.Fetch; host/module's RegistryFetcher).
type ModuleFetcher interface {
	Fetch(ctx context.Context, uri string) (wasm []byte, digest string, err error)
}

// Fetcher is a ModuleFetcher that fetches only verified modules: it
// verifies uri, then fetches the module pinned to the verified digest, so
// that a tag moved between the two cannot slip another module in.
type Fetcher struct {
	Verifier *Verifier
	Inner    ModuleFetcher
}

// Fetch verifies then fetches uri. A refusal (unsigned, not satisfying the
// config, not a registry module) is a *Refused.
func (f *Fetcher) Fetch(ctx context.Context, uri string) ([]byte, string, error) {
	r, err := f.Verifier.Verify(ctx, uri)
	if err != nil {
		if errors.Is(err, ErrUnsigned) || errors.Is(err, ErrNotSatisfied) || errors.Is(err, ErrNotRegistry) {
			return nil, "", &Refused{Err: err}
		}
		return nil, "", fmt.Errorf("verification failed: %w", err)
	}
	wasm, d, err := f.Inner.Fetch(ctx, r.URI)
	if err != nil {
		return nil, "", err
	}
	if d != r.Digest {
		return nil, "", &Refused{Err: fmt.Errorf("%w: %s: fetched manifest %s, verified %s", ErrNotSatisfied, uri, d, r.Digest)}
	}
	return wasm, d, nil
}

// Refused is a module that verification refused: the registry answered,
// and the module does not satisfy the config. (A registry that could not
// be read is not a refusal.) A policy server must not keep serving an
// earlier version of the policy in its place (RefusesPrevious): that
// version may not satisfy the current config either.
type Refused struct{ Err error }

func (r *Refused) Error() string { return "verification failed: " + r.Err.Error() }

func (r *Refused) Unwrap() error { return r.Err }

// RefusesPrevious is true: see Refused.
func (r *Refused) RefusesPrevious() bool { return true }
