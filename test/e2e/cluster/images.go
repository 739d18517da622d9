package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// pushPause builds the pause command (a static binary) and pushes it to the registry as
// PauseImage, a one-layer image.
func (c *Cluster) pushPause(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(c.Dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cluster/pause")
	cmd.Dir = filepath.Join(root, "test", "e2e")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cluster: building the pause binary: %w: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return PushFiles(ctx, PauseImage, map[string][]byte{"pause": data}, []string{"/pause"})
}

// PushFiles pushes a one-layer linux/amd64 image to ref (plain HTTP): the files at the root of
// the layer (mode 0755, owned by root), the entrypoint given.
func PushFiles(ctx context.Context, ref string, files map[string][]byte, entrypoint []string) error {
	var layer bytes.Buffer
	zw := gzip.NewWriter(&layer)
	var plain bytes.Buffer
	tw := tar.NewWriter(&plain)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	diffID := digest.FromBytes(plain.Bytes())
	if _, err := zw.Write(plain.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	cfg, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		Config:   ocispec.ImageConfig{Entrypoint: entrypoint},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
	})
	if err != nil {
		return err
	}
	layerDesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayerGzip, layer.Bytes())
	cfgDesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, cfg)
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return fmt.Errorf("cluster: image %s: %w", ref, err)
	}
	repo.PlainHTTP = true
	for _, b := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{layerDesc, layer.Bytes()}, {cfgDesc, cfg}} {
		if err := repo.Push(ctx, b.desc, bytes.NewReader(b.data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return fmt.Errorf("cluster: pushing %s to %s: %w", b.desc.MediaType, ref, err)
		}
	}
	mDesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, manifest)
	if err := repo.PushReference(ctx, mDesc, bytes.NewReader(manifest), repo.Reference.Reference); err != nil {
		return fmt.Errorf("cluster: pushing the manifest of %s: %w", ref, err)
	}
	return nil
}

// PushLayout copies the image of the OCI image layout dir (e.g. `make image`'s bin/image/oci, which
// has one tag) to ref in a registry over plain HTTP, and returns the pushed digest.
func PushLayout(ctx context.Context, dir, ref string) (string, error) {
	tag, err := layoutTag(dir)
	if err != nil {
		return "", err
	}
	store, err := oci.NewWithContext(ctx, dir)
	if err != nil {
		return "", fmt.Errorf("cluster: OCI layout %s: %w", dir, err)
	}
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return "", fmt.Errorf("cluster: image %s: %w", ref, err)
	}
	repo.PlainHTTP = true
	desc, err := oras.Copy(ctx, store, tag, repo, repo.Reference.Reference, oras.DefaultCopyOptions)
	if err != nil {
		return "", fmt.Errorf("cluster: pushing %s:%s to %s: %w", dir, tag, ref, err)
	}
	return desc.Digest.String(), nil
}

// layoutTag returns the one tag of an OCI image layout (mkimage tags its index with the version).
func layoutTag(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return "", fmt.Errorf("cluster: OCI layout (make image): %w", err)
	}
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return "", fmt.Errorf("cluster: %s/index.json: %w", dir, err)
	}
	for _, m := range idx.Manifests {
		if t := m.Annotations[ocispec.AnnotationRefName]; t != "" {
			return t, nil
		}
	}
	return "", fmt.Errorf("cluster: %s/index.json names no tag", dir)
}
