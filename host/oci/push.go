package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"

	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/tollgate-dev/tollgate/host/metadata"
)

// PushOptions tune Push.
type PushOptions struct {
	// Force pushes a module that has no io.kubewarden.metadata section.
	Force bool
	// Annotations are added to the manifest annotations (after the module's own).
	Annotations map[string]string
}

// pushConfig is the config blob of a pushed module. It is constant so that
// pushing the same module twice gives the same manifest digest.
var pushConfig = []byte("{}")

// Push uploads a Wasm module to uri in Kubewarden's layout: config
// application/vnd.wasm.config.v1+json, one layer
// application/vnd.wasm.content.layer.v1+wasm, the module's metadata
// annotations as manifest annotations (io.kubewarden.policy.source also as
// org.opencontainers.image.source). The manifest carries no timestamp, so
// the same module and annotations always give the same digest, which is
// returned. A URI with a digest is accepted only if it is that digest.
func (c *Client) Push(ctx context.Context, wasm []byte, uri string, opts PushOptions) (string, error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return "", err
	}
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return "", fmt.Errorf("%w: push %s: missing \\0asm magic", ErrInvalidModule, ref)
	}
	md, err := metadata.Read(wasm)
	if err != nil {
		return "", fmt.Errorf("%w: push %s: %w", ErrInvalidModule, ref, err)
	}
	var annotations map[string]string
	if md != nil {
		annotations = md.Annotations
	}
	if md == nil && !opts.Force {
		return "", fmt.Errorf("%w: push %s: annotate it first (tollgate annotate) or pass --force", ErrUnannotated, ref)
	}
	manifestAnn := map[string]string{}
	maps.Copy(manifestAnn, annotations)
	if src := annotations[AnnotationKubewardenSource]; src != "" {
		manifestAnn[ocispec.AnnotationSource] = src
	}
	maps.Copy(manifestAnn, opts.Annotations)
	if len(manifestAnn) == 0 {
		manifestAnn = nil
	}

	configDesc := content.NewDescriptorFromBytes(MediaTypeKubewardenConfig, pushConfig)
	layerDesc := content.NewDescriptorFromBytes(MediaTypeKubewardenLayer, wasm)
	manifest := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      configDesc,
		Layers:      []ocispec.Descriptor{layerDesc},
		Annotations: manifestAnn,
	}
	raw, err := json.Marshal(manifest)
	if err != nil {
		return "", err
	}
	mdesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, raw)
	if ref.Digest != "" && ref.Digest != mdesc.Digest.String() {
		return "", fmt.Errorf("%w: push %s: the manifest of this module is %s", ErrDigestMismatch, ref, mdesc.Digest)
	}

	repo := c.repository(ctx, ref)
	for _, b := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{configDesc, pushConfig}, {layerDesc, wasm}} {
		if err := pushBlob(ctx, repo, b.desc, b.data); err != nil {
			return "", c.classify(ref, "push", err)
		}
	}
	if ref.Tag != "" {
		err = repo.Manifests().PushReference(ctx, mdesc, bytes.NewReader(raw), ref.Tag)
	} else {
		err = repo.Manifests().Push(ctx, mdesc, bytes.NewReader(raw))
	}
	if err != nil {
		return "", c.classify(ref, "push", err)
	}
	return mdesc.Digest.String(), nil
}

func pushBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, data []byte) error {
	ok, err := repo.Blobs().Exists(ctx, desc)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	return repo.Blobs().Push(ctx, desc, bytes.NewReader(data))
}
