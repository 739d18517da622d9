package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

var testEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestImage builds the image for the test machine's architecture, checks the layout, the
// config and the layer, runs the extracted binary, and pushes the image to a real registry.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("the image is linux-only and its binary is run here: run this test on linux, not %s", runtime.GOOS)
	}
	ocitest.RequireRegistry(t)
	// The build reuses `make build`'s packages (same flags); a cold cache on a loaded 2-core
	// machine compiles everything: give it room.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	o := options{
		Root: filepath.Join("..", "..", ".."), Out: t.TempDir(), Platforms: []string{"linux/" + runtime.GOARCH},
		Version: "v0.0.0-test", Revision: "0123456789abcdef", Epoch: testEpoch, CACerts: "/etc/ssl/certs/ca-certificates.crt",
		Logf: t.Logf,
	}
	res, err := build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("index %s, %d bytes of blobs", res.Index.Digest, res.Size)

	store, err := oci.NewFromFS(ctx, os.DirFS(res.LayoutDir))
	if err != nil {
		t.Fatal(err)
	}
	idxDesc, err := store.Resolve(ctx, "v0.0.0-test")
	if err != nil {
		t.Fatalf("resolve the tag in the layout: %v", err)
	}
	if idxDesc.Digest != res.Index.Digest || idxDesc.MediaType != ocispec.MediaTypeImageIndex {
		t.Fatalf("tag resolves to %s %s, want the index %s", idxDesc.MediaType, idxDesc.Digest, res.Index.Digest)
	}
	var index ocispec.Index
	fetchJSON(t, store, idxDesc, &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Platform == nil ||
		index.Manifests[0].Platform.OS != "linux" || index.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Fatalf("index manifests %+v, want one for linux/%s", index.Manifests, runtime.GOARCH)
	}
	if got := index.Annotations[ocispec.AnnotationRevision]; got != o.Revision {
		t.Errorf("index revision annotation %q, want %q", got, o.Revision)
	}
	var manifest ocispec.Manifest
	fetchJSON(t, store, index.Manifests[0], &manifest)
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip {
		t.Fatalf("layers %+v, want one gzip layer", manifest.Layers)
	}
	var cfg ocispec.Image
	fetchJSON(t, store, manifest.Config, &cfg)
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/tollgate"}) || cfg.Config.User != "65532:65532" {
		t.Errorf("entrypoint %q user %q, want [/tollgate] 65532:65532", cfg.Config.Entrypoint, cfg.Config.User)
	}
	if !slices.Contains(cfg.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("env %q lacks SSL_CERT_FILE", cfg.Config.Env)
	}
	for k, want := range map[string]string{
		ocispec.AnnotationSource: sourceURL, ocispec.AnnotationVersion: "v0.0.0-test", ocispec.AnnotationRevision: o.Revision,
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if cfg.Created == nil || !cfg.Created.Equal(testEpoch) || cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("created %v os %s arch %s, want %v linux %s", cfg.Created, cfg.OS, cfg.Architecture, testEpoch, runtime.GOARCH)
	}

	gz, err := content.FetchAll(ctx, store, manifest.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest.FromBytes(raw) {
		t.Errorf("diff_ids %v, want [%s]", cfg.RootFS.DiffIDs, digest.FromBytes(raw))
	}
	files := readTar(t, raw)
	want := map[string]struct {
		mode     int64
		uid      int
		nonEmpty bool
	}{
		"tollgate":                          {0o755, 0, true},
		"etc/ssl/certs/ca-certificates.crt": {0o644, 0, true},
		"etc/passwd":                        {0o644, 0, true},
		"etc/group":                         {0o644, 0, true},
		"tmp/":                              {0o1777, 0, false},
		"cache/":                            {0o755, nonrootUID, false},
		"home/nonroot/":                     {0o700, nonrootUID, false},
	}
	for name, w := range want {
		f, ok := files[name]
		if !ok {
			t.Errorf("layer lacks /%s", name)
			continue
		}
		if f.hdr.Mode != w.mode || f.hdr.Uid != w.uid || !f.hdr.ModTime.Equal(testEpoch) || (len(f.data) > 0) != w.nonEmpty {
			t.Errorf("/%s: mode %o uid %d mtime %v size %d, want mode %o uid %d mtime %v non-empty %v",
				name, f.hdr.Mode, f.hdr.Uid, f.hdr.ModTime, len(f.data), w.mode, w.uid, testEpoch, w.nonEmpty)
		}
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", files["etc/passwd"].data)
	}

	// The binary runs and knows its version.
	bin := filepath.Join(t.TempDir(), "tollgate")
	if err := os.WriteFile(bin, files["tollgate"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("extracted /tollgate version: %v", err)
	}
	var v struct{ Version, OS, Arch string }
	if err := json.Unmarshal(out, &v); err != nil || v.Version != "v0.0.0-test" || v.OS != "linux" || v.Arch != runtime.GOARCH {
		t.Errorf("tollgate version -o json = %s (%v), want version v0.0.0-test linux/%s", out, err, runtime.GOARCH)
	}

	// The tarball holds the same layout.
	tarFiles := readTarFile(t, res.Tarball)
	for _, name := range []string{"oci-layout", "index.json", "blobs/sha256/" + res.Index.Digest.Encoded(), "blobs/sha256/" + manifest.Layers[0].Digest.Encoded()} {
		onDisk, err := os.ReadFile(filepath.Join(res.LayoutDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := tarFiles[name]; !ok || !bytes.Equal(f.data, onDisk) {
			t.Errorf("tarball's %s differs from the layout's (present %v)", name, ok)
		}
	}

	t.Run("push", func(t *testing.T) {
		reg := ocitest.Start(t, ocitest.Options{})
		ref, err := push(ctx, res, reg.Host+"/tollgate/tollgate:pushed", false)
		if err != nil {
			t.Fatal(err)
		}
		if ref != reg.Host+"/tollgate/tollgate:pushed" {
			t.Errorf("pushed %s", ref)
		}
		repo, err := remote.NewRepository(reg.Host + "/tollgate/tollgate")
		if err != nil {
			t.Fatal(err)
		}
		repo.PlainHTTP = true
		desc, rc, err := repo.FetchReference(ctx, "pushed")
		if err != nil {
			t.Fatalf("pull the index back: %v", err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if desc.Digest != res.Index.Digest || digest.FromBytes(b) != res.Index.Digest {
			t.Errorf("registry serves %s, want %s", desc.Digest, res.Index.Digest)
		}
		mdesc, err := repo.Resolve(ctx, index.Manifests[0].Digest.String())
		if err != nil || mdesc.MediaType != ocispec.MediaTypeImageManifest {
			t.Errorf("platform manifest in the registry: %+v %v", mdesc, err)
		}
		if exists, err := repo.Blobs().Exists(ctx, manifest.Layers[0]); err != nil || !exists {
			t.Errorf("layer in the registry: %v %v", exists, err)
		}
		// The tag defaults to the version.
		ref, err = push(ctx, res, reg.Host+"/tollgate/tollgate", false)
		if err != nil || ref != reg.Host+"/tollgate/tollgate:v0.0.0-test" {
			t.Errorf("push without a tag: %s %v", ref, err)
		}
	})
}

// TestReproducible assembles the same binary twice and expects identical digests, layout
// and tarball; a different epoch changes them.
func TestReproducible(t *testing.T) {
	o := options{Version: "v1", Revision: "r", Epoch: testEpoch}
	bin, ca := []byte("\x7fELF not really"), []byte("-----BEGIN CERTIFICATE-----\n")
	once := func(o options) (digest.Digest, []byte) {
		blobs := map[digest.Digest][]byte{}
		desc, err := assemble(blobs, bin, ca, "amd64", o)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "x.tar")
		if err := writeTarball(p, layoutFiles(blobs, desc), o.Epoch); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return desc.Digest, b
	}
	d1, t1 := once(o)
	d2, t2 := once(o)
	if d1 != d2 || !bytes.Equal(t1, t2) {
		t.Errorf("two builds differ: %s %s (tarballs equal: %v)", d1, d2, bytes.Equal(t1, t2))
	}
	o.Epoch = o.Epoch.Add(time.Second)
	if d3, _ := once(o); d3 == d1 {
		t.Errorf("a different epoch gave the same digest %s", d3)
	}
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       options
		wantErr string
	}{
		{"platform", options{Platforms: []string{"windows/amd64"}, Version: "v1", CACerts: "/etc/ssl/certs/ca-certificates.crt"}, `platform "windows/amd64": want linux/ARCH`},
		{"tag", options{Platforms: []string{"linux/amd64"}, Version: "v1+meta", CACerts: "/etc/ssl/certs/ca-certificates.crt"}, "not a valid image tag"},
		{"ca", options{Platforms: []string{"linux/amd64"}, Version: "v1", CACerts: "/nonexistent/ca.crt"}, "CA bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Root, tc.o.Out, tc.o.Epoch, tc.o.Revision = t.TempDir(), t.TempDir(), testEpoch, "r"
			_, err := build(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestChartAppVersion(t *testing.T) {
	v, err := chartAppVersion(filepath.Join("..", "..", ".."))
	if err != nil || !validTag.MatchString(v) {
		t.Fatalf("appVersion %q %v: the chart's appVersion must be a valid image tag", v, err)
	}
}

func fetchJSON(t *testing.T, store content.Fetcher, desc ocispec.Descriptor, v any) {
	t.Helper()
	b, err := content.FetchAll(context.Background(), store, desc)
	if err != nil {
		t.Fatalf("fetch %s: %v", desc.Digest, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", desc.Digest, err)
	}
}

type tarFile struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) map[string]tarFile {
	t.Helper()
	files := map[string]tarFile{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = tarFile{h, data}
	}
}

func readTarFile(t *testing.T, path string) map[string]tarFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readTar(t, b)
}
