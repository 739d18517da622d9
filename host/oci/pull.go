package oci

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// Pull fetches uri from its registry into the store and records it in the
// store's index. Blobs already in the store (and whose content still hashes
// to their digest) are not downloaded again; a corrupted one is replaced.
// Every blob is verified against its digest; the manifest must have exactly
// one Wasm layer no larger than the configured limit. progress, if not nil,
// receives human-readable progress lines for the Wasm layer.
// Concurrent pulls of the same URI share one download.
func (c *Client) Pull(ctx context.Context, uri string, progress io.Writer) (StoreEntry, error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return StoreEntry{}, err
	}
	v, err, _ := c.group.Do(ref.Name(), func() (any, error) {
		return c.pull(ctx, ref, progress)
	})
	if err != nil {
		return StoreEntry{}, err
	}
	return v.(StoreEntry), nil
}

func (c *Client) pull(ctx context.Context, ref Reference, progress io.Writer) (StoreEntry, error) {
	repo := c.repository(ctx, ref)
	mdesc, raw, err := c.fetchManifest(ctx, repo, ref)
	if err != nil {
		return StoreEntry{}, c.classify(ref, "pull", err)
	}
	if err := ctx.Err(); err != nil {
		return StoreEntry{}, err
	}
	m, err := parseManifest(raw, mdesc.MediaType, ref.String())
	if err != nil {
		return StoreEntry{}, err
	}
	layer, err := wasmLayer(m, ref.String(), c.opts.MaxModuleSize)
	if err != nil {
		return StoreEntry{}, err
	}
	if m.Config.Size > maxManifestSize {
		return StoreEntry{}, fmt.Errorf("%w: %s: config blob is %d bytes, limit %d", ErrTooLarge, ref, m.Config.Size, maxManifestSize)
	}
	// A stored blob is verified before it is trusted: a corrupted one is
	// downloaded again and replaced.
	if !c.store.hasValidBlob(layer) {
		if err := c.fetchBlob(ctx, repo, layer, ref, progress); err != nil {
			return StoreEntry{}, err
		}
	}
	if m.Config.Digest != "" && !c.store.hasValidBlob(m.Config) {
		if err := c.fetchBlob(ctx, repo, m.Config, ref, nil); err != nil {
			return StoreEntry{}, err
		}
	}
	if err := c.store.writeBlob(mdesc, bytesReader(raw)); err != nil {
		return StoreEntry{}, err
	}
	if err := c.store.add(ref.Name(), mdesc, layer, moduleTitle(m.Annotations)); err != nil {
		return StoreEntry{}, err
	}
	return c.store.Lookup(ref.String())
}

// fetchManifest gets the manifest by digest (when pinned) or tag, bounded in
// size and verified against the pinned digest or the registry's
// Docker-Content-Digest.
func (c *Client) fetchManifest(ctx context.Context, repo *remote.Repository, ref Reference) (ocispec.Descriptor, []byte, error) {
	desc, rc, err := repo.Manifests().FetchReference(ctx, ref.target())
	if err != nil {
		if isDigestHeaderMismatch(err) {
			return desc, nil, fmt.Errorf("%w: %s: %v", ErrDigestMismatch, ref, err)
		}
		return desc, nil, err
	}
	defer rc.Close()
	if desc.Size > maxManifestSize {
		return desc, nil, fmt.Errorf("%w: %s: manifest is %d bytes, limit %d", ErrTooLarge, ref, desc.Size, maxManifestSize)
	}
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		return desc, nil, mapVerifyErr(desc, err)
	}
	if ref.Digest != "" && desc.Digest.String() != ref.Digest {
		return desc, nil, fmt.Errorf("%w: %s: registry returned manifest %s", ErrDigestMismatch, ref, desc.Digest)
	}
	// Belt and braces: hash what we got, whatever the headers said.
	if got := digest.FromBytes(raw); got != desc.Digest {
		return desc, nil, fmt.Errorf("%w: %s: manifest hashes to %s, registry said %s", ErrDigestMismatch, ref, got, desc.Digest)
	}
	return desc, raw, nil
}

func isDigestHeaderMismatch(err error) bool {
	return err != nil && containsAll(err.Error(), "digest mismatch")
}

// fetchBlob downloads desc into the store, verifying it as it streams.
func (c *Client) fetchBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, ref Reference, progress io.Writer) error {
	rc, err := repo.Blobs().Fetch(ctx, desc)
	if err != nil {
		if isDigestHeaderMismatch(err) {
			return fmt.Errorf("%w: %s: blob %s: %v", ErrDigestMismatch, ref, desc.Digest, err)
		}
		return c.classify(ref, "pull", err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if progress != nil {
		r = newProgressReader(rc, progress, ref.String(), desc.Size)
	}
	if err := c.store.writeBlob(desc, r); err != nil {
		if errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrIncomplete) {
			return fmt.Errorf("pull %s: %w", ref, err)
		}
		return c.classify(ref, "pull", err)
	}
	if p, ok := r.(*progressReader); ok {
		p.done()
	}
	return nil
}

// Fetch returns the Wasm bytes and manifest digest ("sha256:...") of a
// registry:// module, for the module loader:
//   - pinned by digest (…@sha256:…) and already in the store: read from the
//     store (verified), no network;
//   - otherwise pulled (only missing blobs are downloaded);
//   - a tag whose registry is unreachable, but that the store has: the
//     stored copy is used and a warning is logged. Any other registry
//     answer (not found, unauthorized, …) is an error: the store never hides
//     a registry that says no.
func (c *Client) Fetch(ctx context.Context, uri string) (wasm []byte, dgst string, err error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return nil, "", err
	}
	if ref.Digest != "" {
		if wasm, _, err := c.store.moduleByDigest(digest.Digest(ref.Digest), c.opts.MaxModuleSize); err == nil {
			return wasm, ref.Digest, nil
		} else if !errors.Is(err, ErrNotInStore) {
			c.log.Warn("stored module unreadable, pulling it again", "uri", uri, "error", err)
		}
	}
	entry, err := c.Pull(ctx, uri, nil)
	if err != nil {
		if ref.Digest == "" && errors.Is(err, ErrUnreachable) {
			if e, lerr := c.store.Lookup(uri); lerr == nil {
				if wasm, _, rerr := c.store.moduleByDigest(digest.Digest(e.Digest), c.opts.MaxModuleSize); rerr == nil {
					c.log.Warn("registry unreachable, using the module from the local store",
						"uri", uri, "digest", e.Digest, "pulled", e.PulledAt, "error", err)
					return wasm, e.Digest, nil
				}
			}
		}
		return nil, "", err
	}
	wasm, _, err = c.store.moduleByDigest(digest.Digest(entry.Digest), c.opts.MaxModuleSize)
	if err != nil {
		return nil, "", err
	}
	return wasm, entry.Digest, nil
}

// Resolve asks the registry for the manifest digest of uri (HEAD, no download).
func (c *Client) Resolve(ctx context.Context, uri string) (string, error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return "", err
	}
	repo := c.repository(ctx, ref)
	desc, err := repo.Resolve(ctx, ref.target())
	if err != nil {
		return "", c.classify(ref, "resolve", err)
	}
	if ref.Digest != "" && desc.Digest.String() != ref.Digest {
		return "", fmt.Errorf("%w: %s: registry resolved it to %s", ErrDigestMismatch, ref, desc.Digest)
	}
	return desc.Digest.String(), nil
}
