package oci

import (
	"encoding/json"
	"fmt"
	"slices"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types of Wasm artifacts.
const (
	// Kubewarden's layout (what Push writes).
	MediaTypeKubewardenConfig = "application/vnd.wasm.config.v1+json"
	MediaTypeKubewardenLayer  = "application/vnd.wasm.content.layer.v1+wasm"
	// The CNCF TAG Runtime Wasm OCI artifact layout (accepted on pull).
	MediaTypeCNCFConfig = "application/vnd.wasm.config.v0+json"
	MediaTypeCNCFLayer  = "application/wasm"

	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
)

// AnnotationKubewardenSource is copied to ocispec.AnnotationSource on push.
const AnnotationKubewardenSource = "io.kubewarden.policy.source"

// AnnotationKubewardenTitle is the policy title annotation.
const AnnotationKubewardenTitle = "io.kubewarden.policy.title"

var wasmLayerTypes = []string{MediaTypeKubewardenLayer, MediaTypeCNCFLayer}

// parseManifest decodes an image manifest, refusing indexes and other kinds.
func parseManifest(raw []byte, mediaType, name string) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("%w: %s: manifest is not JSON: %v", ErrNotWasm, name, err)
	}
	if mediaType == "" {
		mediaType = m.MediaType
	}
	switch mediaType {
	case ocispec.MediaTypeImageManifest, mediaTypeDockerManifest, "":
	default:
		return m, fmt.Errorf("%w: %s: manifest media type %q: want an image manifest (%s) with one Wasm layer", ErrNotWasm, name, mediaType, ocispec.MediaTypeImageManifest)
	}
	return m, nil
}

// wasmLayer returns the single Wasm layer of m, checking its media type and size.
func wasmLayer(m ocispec.Manifest, name string, maxSize int64) (ocispec.Descriptor, error) {
	if len(m.Layers) != 1 {
		types := make([]string, 0, len(m.Layers))
		for _, l := range m.Layers {
			types = append(types, l.MediaType)
		}
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s: manifest has %d layers %q: want exactly one %s or %s layer",
			ErrNotWasm, name, len(m.Layers), types, MediaTypeKubewardenLayer, MediaTypeCNCFLayer)
	}
	l := m.Layers[0]
	if !slices.Contains(wasmLayerTypes, l.MediaType) {
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s: layer media type is %q (config %q): want %s or %s",
			ErrNotWasm, name, l.MediaType, m.Config.MediaType, MediaTypeKubewardenLayer, MediaTypeCNCFLayer)
	}
	if err := l.Digest.Validate(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s: layer digest %q: %v", ErrNotWasm, name, l.Digest, err)
	}
	if l.Size < 0 {
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s: layer size %d", ErrNotWasm, name, l.Size)
	}
	if maxSize > 0 && l.Size > maxSize {
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s: Wasm layer is %d bytes, limit is %d (raise it with --max-module-size)",
			ErrTooLarge, name, l.Size, maxSize)
	}
	return l, nil
}

// moduleTitle picks a display title from manifest annotations.
func moduleTitle(a map[string]string) string {
	if t := a[AnnotationKubewardenTitle]; t != "" {
		return t
	}
	return a[ocispec.AnnotationTitle]
}
