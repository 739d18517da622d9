package verify

import (
	"context"
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

// Fetch verifies then fetches uri.
func (f *Fetcher) Fetch(ctx context.Context, uri string) ([]byte, string, error) {
	r, err := f.Verifier.Verify(ctx, uri)
	if err != nil {
		return nil, "", fmt.Errorf("verification failed: %w", err)
	}
	wasm, d, err := f.Inner.Fetch(ctx, r.URI)
	if err != nil {
		return nil, "", err
	}
	if d != r.Digest {
		return nil, "", fmt.Errorf("verification failed: %s: fetched manifest %s, verified %s", uri, d, r.Digest)
	}
	return wasm, d, nil
}
