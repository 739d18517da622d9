package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// maxConfigSize bounds an image config read by ImageManifestAndConfig.
const maxConfigSize = 4 << 20

// Docker Hub names, as container tools default them.
const (
	dockerHub    = "docker.io"
	dockerHubAPI = "registry-1.docker.io"
)

// ParseImage parses an image reference as container tools write it, without
// a scheme: "busybox", "library/busybox:1", "ghcr.io/org/img:tag",
// "host:5000/img@sha256:...". A first component without '.' or ':' (and not
// "localhost") is a Docker Hub repository; a single-component Docker Hub name
// gets "library/".
func ParseImage(image string) (Reference, error) {
	if image == "" || strings.Contains(image, "://") {
		return Reference{}, fmt.Errorf("%w: %q: want an image reference such as ghcr.io/org/image:tag", ErrMalformedReference, image)
	}
	first, rest, ok := strings.Cut(image, "/")
	if !ok || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		rest = image
		first = dockerHub
		if !strings.Contains(rest, "/") {
			rest = "library/" + rest
		}
	}
	if first == dockerHub || first == "index.docker.io" {
		first = dockerHubAPI
	}
	return ParseURI(Scheme + first + "/" + rest)
}

// ImageDigest asks the registry for the manifest digest of an image
// reference (see ParseImage): the index digest of a multi-platform image.
func (c *Client) ImageDigest(ctx context.Context, image string) (string, error) {
	ref, err := ParseImage(image)
	if err != nil {
		return "", err
	}
	return c.Resolve(ctx, ref.String())
}

// ImageManifest fetches an image's manifest as the registry serves it (an
// image manifest or an index), verified against its digest.
func (c *Client) ImageManifest(ctx context.Context, image string) (mediaType, dgst string, raw []byte, err error) {
	ref, err := ParseImage(image)
	if err != nil {
		return "", "", nil, err
	}
	desc, raw, err := c.fetchManifest(ctx, c.repository(ctx, ref), ref)
	if err != nil {
		return "", "", nil, c.classify(ref, "fetch manifest of", err)
	}
	return desc.MediaType, desc.Digest.String(), raw, nil
}

// ImageManifestAndConfig fetches an image manifest (an index is resolved to
// the linux manifest of this machine's architecture), its digest and its
// config blob.
func (c *Client) ImageManifestAndConfig(ctx context.Context, image string) (manifest []byte, dgst string, config []byte, err error) {
	ref, err := ParseImage(image)
	if err != nil {
		return nil, "", nil, err
	}
	repo := c.repository(ctx, ref)
	desc, raw, err := c.fetchManifest(ctx, repo, ref)
	if err != nil {
		return nil, "", nil, c.classify(ref, "fetch manifest of", err)
	}
	if isIndex(desc.MediaType, raw) {
		var idx ocispec.Index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, "", nil, fmt.Errorf("%s: image index: %w", ref, err)
		}
		var pick *ocispec.Descriptor
		for i, m := range idx.Manifests {
			if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
				pick = &idx.Manifests[i]
				break
			}
		}
		if pick == nil {
			return nil, "", nil, fmt.Errorf("%w: %s: the image index has no linux/%s manifest", ErrNotFound, ref, runtime.GOARCH)
		}
		pref := ref
		pref.Digest = pick.Digest.String()
		if desc, raw, err = c.fetchManifest(ctx, repo, pref); err != nil {
			return nil, "", nil, c.classify(pref, "fetch manifest of", err)
		}
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", nil, fmt.Errorf("%s: image manifest: %w", ref, err)
	}
	if m.Config.Size > maxConfigSize {
		return nil, "", nil, fmt.Errorf("%w: %s: config is %d bytes, limit %d", ErrTooLarge, ref, m.Config.Size, maxConfigSize)
	}
	if err := m.Config.Digest.Validate(); err != nil {
		return nil, "", nil, fmt.Errorf("%s: config digest: %w", ref, err)
	}
	rc, err := repo.Blobs().Fetch(ctx, m.Config)
	if err != nil {
		return nil, "", nil, c.classify(ref, "fetch config of", err)
	}
	defer rc.Close()
	cfg, err := content.ReadAll(rc, m.Config)
	if err != nil {
		return nil, "", nil, mapVerifyErr(m.Config, err)
	}
	return raw, desc.Digest.String(), cfg, nil
}

func isIndex(mediaType string, raw []byte) bool {
	switch mediaType {
	case ocispec.MediaTypeImageIndex, "application/vnd.docker.distribution.manifest.list.v2+json":
		return true
	}
	var probe struct {
		Manifests []json.RawMessage `json:"manifests"`
		Config    json.RawMessage   `json:"config"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.Manifests != nil && probe.Config == nil
}
