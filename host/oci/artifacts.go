package oci

import (
	"context"
	"fmt"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// maxArtifactBlob bounds a blob read by Blob: signature payloads, Sigstore
// bundles and certificates are a few KiB.
const maxArtifactBlob = 4 << 20

// Manifest fetches the manifest (or index) that uri names, by digest when
// pinned, else by tag, verified against its digest. A missing tag or digest
// is an error wrapping ErrNotFound. It is how host/verify reads signature
// manifests (sha256-<hex>.sig tags, referrers) with this client's transport,
// credentials and sources.yml.
func (c *Client) Manifest(ctx context.Context, uri string) (desc ocispec.Descriptor, raw []byte, err error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	desc, raw, err = c.fetchManifest(ctx, c.repository(ctx, ref), ref)
	if err != nil {
		return ocispec.Descriptor{}, nil, c.classify(ref, "fetch manifest of", err)
	}
	return desc, raw, nil
}

// Blob fetches a small blob (at most 4 MiB) of uri's repository, verified
// against desc's digest and size.
func (c *Client) Blob(ctx context.Context, uri string, desc ocispec.Descriptor) ([]byte, error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if desc.Size > maxArtifactBlob {
		return nil, fmt.Errorf("%w: %s: blob %s is %d bytes, limit %d", ErrTooLarge, ref, desc.Digest, desc.Size, maxArtifactBlob)
	}
	rc, err := c.repository(ctx, ref).Blobs().Fetch(ctx, desc)
	if err != nil {
		return nil, c.classify(ref, "fetch blob of", err)
	}
	defer rc.Close()
	b, err := content.ReadAll(rc, desc)
	if err != nil {
		return nil, fmt.Errorf("%s: blob %s: %w", ref, desc.Digest, mapVerifyErr(desc, err))
	}
	return b, nil
}

// Referrers lists the manifests whose subject is the manifest uri pins
// (uri must have a digest), of the given artifactType ("" = any): the OCI
// referrers API, or the sha256-<hex> tag index where the registry has no
// such API (distribution 2.8). No referrers is an empty list.
func (c *Client) Referrers(ctx context.Context, uri, artifactType string) ([]ocispec.Descriptor, error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if ref.Digest == "" {
		return nil, fmt.Errorf("%w: %s: referrers need a manifest digest (…@sha256:…)", ErrMalformedReference, ref)
	}
	repo := c.repository(ctx, ref)
	subject, err := repo.Resolve(ctx, ref.Digest)
	if err != nil {
		return nil, c.classify(ref, "resolve", err)
	}
	var out []ocispec.Descriptor
	err = repo.Referrers(ctx, subject, artifactType, func(rs []ocispec.Descriptor) error {
		out = append(out, rs...)
		return nil
	})
	if err != nil {
		return nil, c.classify(ref, "list referrers of", err)
	}
	return out, nil
}
