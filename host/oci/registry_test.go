package oci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

var policyAnnotations = map[string]string{
	"io.kubewarden.policy.title":  "test-policy",
	"io.kubewarden.policy.source": "https://example.com/tollgate/test-policy",
	"io.kubewarden.policy.author": "tollgate tests",
}

type clientOpt func(*oci.Options)

func newClient(t *testing.T, reg *ocitest.Registry, opts ...clientOpt) *oci.Client {
	t.Helper()
	o := oci.Options{
		StorePath:        filepath.Join(t.TempDir(), "store"),
		DockerConfigPath: reg.DockerConfigPath,
		SourcesPath:      reg.SourcesPath,
		ConnectTimeout:   2 * time.Second,
		ResponseTimeout:  5 * time.Second,
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := oci.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withStore(p string) clientOpt { return func(o *oci.Options) { o.StorePath = p } }

func withDockerConfig(t *testing.T, b []byte) clientOpt {
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return func(o *oci.Options) { o.DockerConfigPath = p }
}

func wantErr(t *testing.T, err, sentinel error, substrings ...string) {
	t.Helper()
	t.Logf("error: %v", err)
	if !errors.Is(err, sentinel) {
		t.Fatalf("error = %v, want %v", err, sentinel)
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not mention %q", err, s)
		}
	}
}

func storeFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, d := range []string{"blobs/sha256", "ingest"} {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			files = append(files, d+"/"+e.Name())
		}
	}
	return files
}

func TestRegistryTLSWithAuth(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	wasm := ocitest.Wasm(policyAnnotations, 100_000)
	uri := reg.URI("policies/test:v1")
	c := newClient(t, reg)

	dgst, err := c.Push(ctx, wasm, uri, oci.PushOptions{})
	if err != nil {
		t.Fatalf("push: %v", err)
	}

	t.Run("push is reproducible", func(t *testing.T) {
		again, err := c.Push(ctx, wasm, reg.URI("policies/test:v1-copy"), oci.PushOptions{})
		if err != nil || again != dgst {
			t.Fatalf("second push = %s, %v; want %s", again, err, dgst)
		}
	})

	t.Run("round trip byte for byte", func(t *testing.T) {
		var progress bytes.Buffer
		e, err := c.Pull(ctx, uri, &progress)
		if err != nil {
			t.Fatal(err)
		}
		if e.Digest != dgst || e.Size != int64(len(wasm)) || e.Title != "test-policy" || e.URI != uri ||
			e.MediaType != oci.MediaTypeKubewardenLayer || e.ModuleDigest != digest.FromBytes(wasm).String() {
			t.Fatalf("entry = %+v", e)
		}
		got, err := os.ReadFile(e.Path)
		if err != nil || !bytes.Equal(got, wasm) {
			t.Fatalf("stored module differs from pushed one (%d vs %d bytes, %v)", len(got), len(wasm), err)
		}
		if progress.Len() != 0 && !strings.Contains(progress.String(), uri) {
			t.Fatalf("no progress for %s: %q", uri, progress.String())
		}
		fetched, fd, err := c.Fetch(ctx, uri)
		if err != nil || fd != dgst || !bytes.Equal(fetched, wasm) {
			t.Fatalf("Fetch = %d bytes, %s, %v", len(fetched), fd, err)
		}
	})

	t.Run("kubewarden layout and annotations", func(t *testing.T) {
		m := readStoredManifest(t, c, dgst)
		if m.Config.MediaType != oci.MediaTypeKubewardenConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != oci.MediaTypeKubewardenLayer {
			t.Fatalf("manifest layout: %+v", m)
		}
		for k, v := range policyAnnotations {
			if m.Annotations[k] != v {
				t.Fatalf("annotation %s = %q, want %q", k, m.Annotations[k], v)
			}
		}
		if m.Annotations[ocispec.AnnotationSource] != policyAnnotations["io.kubewarden.policy.source"] {
			t.Fatalf("org.opencontainers.image.source = %q", m.Annotations[ocispec.AnnotationSource])
		}
	})

	t.Run("resolve", func(t *testing.T) {
		got, err := c.Resolve(ctx, uri)
		if err != nil || got != dgst {
			t.Fatalf("Resolve = %s, %v; want %s", got, err, dgst)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		bad := newClient(t, reg, withDockerConfig(t, ocitest.DockerConfig(reg.Host, reg.Username, "wrong")))
		_, err := bad.Pull(ctx, uri, nil)
		wantErr(t, err, oci.ErrUnauthorized, reg.Host, "401")
		_, err = bad.Push(ctx, wasm, reg.URI("policies/other:v1"), oci.PushOptions{})
		wantErr(t, err, oci.ErrUnauthorized, reg.Host)
	})

	t.Run("no credentials", func(t *testing.T) {
		anon := newClient(t, reg, withDockerConfig(t, []byte(`{"auths":{}}`)))
		_, err := anon.Pull(ctx, uri, nil)
		wantErr(t, err, oci.ErrUnauthorized, reg.Host, "requires credentials")
	})

	t.Run("credential helper", func(t *testing.T) {
		// A docker-credential-* program on PATH, named by credHelpers, as
		// docker login with a credential store sets up.
		bin := t.TempDir()
		helper := "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\n" +
			"printf '{\"ServerURL\":\"%s\",\"Username\":\"" + reg.Username + "\",\"Secret\":\"" + reg.Password + "\"}' \"$server\"\n"
		if err := os.WriteFile(filepath.Join(bin, "docker-credential-tollgatetest"), []byte(helper), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		cfg := []byte(`{"credHelpers":{"` + reg.Host + `":"tollgatetest"}}`)
		hc := newClient(t, reg, withDockerConfig(t, cfg))
		if _, err := hc.Pull(ctx, uri, nil); err != nil {
			t.Fatalf("pull with a credential helper: %v", err)
		}
	})

	t.Run("untrusted certificate", func(t *testing.T) {
		noCA := newClient(t, reg, func(o *oci.Options) { o.Sources = &oci.Sources{} })
		_, err := noCA.Pull(ctx, uri, nil)
		wantErr(t, err, oci.ErrUntrustedCertificate, reg.Host, "source_authorities")
	})

	t.Run("tag not found", func(t *testing.T) {
		_, err := c.Pull(ctx, reg.URI("policies/test:nope"), nil)
		wantErr(t, err, oci.ErrNotFound, "policies/test:nope")
		_, _, err = c.Fetch(ctx, reg.URI("no/such-repo:v1"))
		wantErr(t, err, oci.ErrNotFound, "no/such-repo")
	})

	t.Run("unknown digest", func(t *testing.T) {
		_, err := c.Pull(ctx, reg.URI("policies/test@"+digest.FromString("x").String()), nil)
		wantErr(t, err, oci.ErrNotFound)
	})

	t.Run("unannotated module", func(t *testing.T) {
		plain := ocitest.Wasm(nil, 10)
		_, err := c.Push(ctx, plain, reg.URI("policies/plain:v1"), oci.PushOptions{})
		wantErr(t, err, oci.ErrUnannotated, "--force")
		d, err := c.Push(ctx, plain, reg.URI("policies/plain:v1"), oci.PushOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		got, gd, err := c.Fetch(ctx, reg.URI("policies/plain:v1"))
		if err != nil || gd != d || !bytes.Equal(got, plain) {
			t.Fatalf("fetch forced push: %s %v", gd, err)
		}
	})

	t.Run("not wasm", func(t *testing.T) {
		_, err := c.Push(ctx, []byte("#!/bin/sh\necho hi\n"), reg.URI("policies/sh:v1"), oci.PushOptions{Force: true})
		wantErr(t, err, oci.ErrInvalidModule, "magic")
	})

	t.Run("pinned digest comes from the store", func(t *testing.T) {
		store := filepath.Join(t.TempDir(), "store")
		pinned := reg.URI("policies/test@" + dgst)
		first := newClient(t, reg, withStore(store))
		if _, _, err := first.Fetch(ctx, pinned); err != nil {
			t.Fatal(err)
		}
		// Same store, credentials that the registry would refuse: a pinned
		// module already stored must not touch the registry.
		offline := newClient(t, reg, withStore(store), withDockerConfig(t, ocitest.DockerConfig(reg.Host, "x", "y")))
		got, gd, err := offline.Fetch(ctx, pinned)
		if err != nil || gd != dgst || !bytes.Equal(got, wasm) {
			t.Fatalf("pinned fetch from store: %s %v", gd, err)
		}
		// A tag is resolved against the registry, which refuses these credentials.
		if _, err := offline.Pull(ctx, uri, nil); !errors.Is(err, oci.ErrUnauthorized) {
			t.Fatalf("tag with bad credentials: %v", err)
		}
	})
}

func readStoredManifest(t *testing.T, c *oci.Client, d string) ocispec.Manifest {
	t.Helper()
	raw, err := os.ReadFile(c.Store().BlobPath(digest.Digest(d)))
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// pushRaw pushes an arbitrary single-layer manifest with oras directly.
func pushRaw(t *testing.T, reg *ocitest.Registry, repo, tag, configType, layerType string, layer []byte) string {
	t.Helper()
	ctx := context.Background()
	r, err := remote.NewRepository(reg.Host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	cfg := []byte(`{"architecture":"wasm","os":"wasip1"}`)
	cdesc := content.NewDescriptorFromBytes(configType, cfg)
	ldesc := content.NewDescriptorFromBytes(layerType, layer)
	for _, b := range []struct {
		d ocispec.Descriptor
		b []byte
	}{{cdesc, cfg}, {ldesc, layer}} {
		if err := r.Blobs().Push(ctx, b.d, bytes.NewReader(b.b)); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cdesc, Layers: []ocispec.Descriptor{ldesc}})
	mdesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, m)
	if err := r.Manifests().PushReference(ctx, mdesc, bytes.NewReader(m), tag); err != nil {
		t.Fatal(err)
	}
	return mdesc.Digest.String()
}

func TestRegistryInsecure(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t, ocitest.Options{})
	c := newClient(t, reg)
	wasm := ocitest.Wasm(policyAnnotations, 4096)
	uri := reg.URI("policies/a:v1")
	dgst, err := c.Push(ctx, wasm, uri, oci.PushOptions{})
	if err != nil {
		t.Fatalf("push over plain HTTP: %v", err)
	}

	t.Run("round trip over plain HTTP", func(t *testing.T) {
		got, gd, err := c.Fetch(ctx, uri)
		if err != nil || gd != dgst || !bytes.Equal(got, wasm) {
			t.Fatalf("Fetch: %s %v", gd, err)
		}
	})

	t.Run("plain HTTP needs insecure_sources", func(t *testing.T) {
		strict := newClient(t, reg, func(o *oci.Options) { o.Sources = &oci.Sources{} })
		_, err := strict.Pull(ctx, uri, nil)
		wantErr(t, err, oci.ErrUnreachable, reg.Host)
	})

	t.Run("CNCF wasm layout", func(t *testing.T) {
		mod := ocitest.Wasm(nil, 300)
		d := pushRaw(t, reg, "cncf/mod", "v1", oci.MediaTypeCNCFConfig, oci.MediaTypeCNCFLayer, mod)
		got, gd, err := c.Fetch(ctx, reg.URI("cncf/mod:v1"))
		if err != nil || gd != d || !bytes.Equal(got, mod) {
			t.Fatalf("CNCF layout: %s %v", gd, err)
		}
	})

	t.Run("oras push layout (empty config)", func(t *testing.T) {
		// `oras push --artifact-type ... policy.wasm:application/vnd.wasm.content.layer.v1+wasm`
		mod := ocitest.Wasm(nil, 100)
		d := pushRaw(t, reg, "oras/mod", "v1", ocispec.MediaTypeEmptyJSON, oci.MediaTypeKubewardenLayer, mod)
		got, gd, err := c.Fetch(ctx, reg.URI("oras/mod:v1"))
		if err != nil || gd != d || !bytes.Equal(got, mod) {
			t.Fatalf("oras layout: %s %v", gd, err)
		}
	})

	t.Run("non-wasm layer", func(t *testing.T) {
		pushRaw(t, reg, "images/tar", "v1", ocispec.MediaTypeImageConfig, ocispec.MediaTypeImageLayerGzip, []byte("not a tarball"))
		_, err := c.Pull(ctx, reg.URI("images/tar:v1"), nil)
		wantErr(t, err, oci.ErrNotWasm, ocispec.MediaTypeImageLayerGzip, "images/tar:v1")
	})

	t.Run("blob over the limit", func(t *testing.T) {
		small := newClient(t, reg, func(o *oci.Options) { o.MaxModuleSize = 1024 })
		_, err := small.Pull(ctx, uri, nil)
		wantErr(t, err, oci.ErrTooLarge, "limit is 1024")
		if files := storeFiles(t, small.Store().Root()); len(files) != 0 {
			t.Fatalf("store not empty after a refused pull: %v", files)
		}
	})

	t.Run("store list and rm", func(t *testing.T) {
		st := newClient(t, reg)
		uri2 := reg.URI("policies/a:v1-again")
		if _, err := st.Push(ctx, wasm, uri2, oci.PushOptions{}); err != nil {
			t.Fatal(err)
		}
		other := ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": "other"}, 10)
		uri3 := reg.URI("policies/b:v1")
		d3, err := st.Push(ctx, other, uri3, oci.PushOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{uri, uri2, uri3} {
			if _, err := st.Pull(ctx, u, nil); err != nil {
				t.Fatal(err)
			}
		}
		list, err := st.Store().List()
		if err != nil || len(list) != 3 {
			t.Fatalf("List = %+v, %v", list, err)
		}
		if list[0].URI != uri || list[2].URI != uri3 || list[2].Title != "other" || list[2].Digest != d3 {
			t.Fatalf("List = %+v", list)
		}
		// uri and uri2 share blobs: removing one keeps the module file.
		if _, err := st.Store().Remove(uri); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(list[1].Path); err != nil {
			t.Fatalf("shared blob removed with one of its names: %v", err)
		}
		if _, err := st.Store().Remove(d3); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(list[2].Path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("blob of removed module still there: %v", err)
		}
		left, _ := st.Store().List()
		if len(left) != 1 || left[0].URI != uri2 {
			t.Fatalf("after rm: %+v", left)
		}
		_, err = st.Store().Remove(uri3)
		wantErr(t, err, oci.ErrNotInStore, "policies/b:v1")
		_, err = st.Store().Remove("nonsense")
		wantErr(t, err, oci.ErrUnknownScheme, "nonsense")
	})

	t.Run("save and load", func(t *testing.T) {
		src := newClient(t, reg)
		cncf := reg.URI("cncf/mod:v1")
		for _, u := range []string{uri, cncf} {
			if _, err := src.Pull(ctx, u, nil); err != nil {
				t.Fatal(err)
			}
		}
		var bundle bytes.Buffer
		if err := src.Store().Save(&bundle, uri, cncf); err != nil {
			t.Fatal(err)
		}
		if err := src.Store().Save(&bytes.Buffer{}, reg.URI("not/pulled:v1")); !errors.Is(err, oci.ErrNotInStore) {
			t.Fatalf("save of a missing module: %v", err)
		}
		// Load into a fresh store with a client that cannot reach any registry.
		air := newClient(t, reg, func(o *oci.Options) { o.Sources = &oci.Sources{} })
		added, err := air.Store().Load(bytes.NewReader(bundle.Bytes()), 0)
		if err != nil || len(added) != 2 {
			t.Fatalf("Load = %+v, %v", added, err)
		}
		want, _ := src.Store().List()
		got, _ := air.Store().List()
		if len(got) != len(want) {
			t.Fatalf("loaded %d entries, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].URI != want[i].URI || got[i].Digest != want[i].Digest || got[i].Size != want[i].Size || got[i].Title != want[i].Title {
				t.Fatalf("entry %d: %+v vs %+v", i, got[i], want[i])
			}
		}
		mod, gd, err := air.Fetch(ctx, reg.URI("policies/a@"+dgst))
		if err != nil || gd != dgst || !bytes.Equal(mod, wasm) {
			t.Fatalf("pinned fetch after load: %s %v", gd, err)
		}
		// A corrupted bundle is refused and leaves no blob behind.
		bad := bytes.Replace(bundle.Bytes(), []byte("padding"), []byte("PADDING"), 1)
		broken := newClient(t, reg)
		_, err = broken.Store().Load(bytes.NewReader(bad), 0)
		wantErr(t, err, oci.ErrDigestMismatch)
		if files := storeFiles(t, broken.Store().Root()); len(files) > 2 {
			t.Fatalf("corrupted bundle left %v", files)
		}
	})

	t.Run("interrupted download", func(t *testing.T) {
		proxy := tamperingProxy(t, reg, digest.FromBytes(wasm), "truncate")
		c := newClient(t, reg, func(o *oci.Options) { o.Sources = &oci.Sources{InsecureSources: []string{proxy}} })
		_, err := c.Pull(ctx, "registry://"+proxy+"/policies/a:v1", nil)
		wantErr(t, err, oci.ErrIncomplete, digest.FromBytes(wasm).String())
		if files := storeFiles(t, c.Store().Root()); len(files) != 0 {
			t.Fatalf("interrupted download left files in the store: %v", files)
		}
	})

	t.Run("digest mismatch", func(t *testing.T) {
		proxy := tamperingProxy(t, reg, digest.FromBytes(wasm), "corrupt")
		c := newClient(t, reg, func(o *oci.Options) { o.Sources = &oci.Sources{InsecureSources: []string{proxy}} })
		_, err := c.Pull(ctx, "registry://"+proxy+"/policies/a:v1", nil)
		wantErr(t, err, oci.ErrDigestMismatch, digest.FromBytes(wasm).String())
		if files := storeFiles(t, c.Store().Root()); len(files) != 0 {
			t.Fatalf("corrupted download left files in the store: %v", files)
		}
		proxy = tamperingProxy(t, reg, digest.Digest(dgst), "corrupt")
		c = newClient(t, reg, func(o *oci.Options) { o.Sources = &oci.Sources{InsecureSources: []string{proxy}} })
		_, err = c.Pull(ctx, "registry://"+proxy+"/policies/a@"+dgst, nil)
		wantErr(t, err, oci.ErrDigestMismatch)
	})

	t.Run("unreachable registry in bounded time", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		blackhole := l.Addr().String()
		var conns atomic.Int32
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				conns.Add(1)
				defer c.Close() // never answer
			}
		}()
		t.Cleanup(func() { l.Close() })
		l2, _ := net.Listen("tcp", "127.0.0.1:0")
		closed := l2.Addr().String()
		l2.Close()
		for _, host := range []string{closed, blackhole} {
			c := newClient(t, reg, func(o *oci.Options) {
				o.Sources = &oci.Sources{}
				o.ConnectTimeout, o.ResponseTimeout = 300*time.Millisecond, 300*time.Millisecond
			})
			start := time.Now()
			_, err := c.Pull(ctx, "registry://"+host+"/p:v1", nil)
			wantErr(t, err, oci.ErrUnreachable, host)
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("%s: took %s", host, d)
			}
		}
	})

	t.Run("tag falls back to the store when the registry is down", func(t *testing.T) {
		var logs bytes.Buffer
		store := filepath.Join(t.TempDir(), "store")
		c := newClient(t, reg, withStore(store), func(o *oci.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		if _, _, err := c.Fetch(ctx, uri); err != nil {
			t.Fatal(err)
		}
		reg.Stop()
		got, gd, err := c.Fetch(ctx, uri)
		if err != nil || gd != dgst || !bytes.Equal(got, wasm) {
			t.Fatalf("fallback Fetch: %s %v", gd, err)
		}
		if !strings.Contains(logs.String(), "registry unreachable") {
			t.Fatalf("no warning logged: %q", logs.String())
		}
		_, _, err = c.Fetch(ctx, reg.URI("policies/never-pulled:v1"))
		wantErr(t, err, oci.ErrUnreachable)
	})
}

// tamperingProxy forwards to reg, but the response for blob target is cut
// in half ("truncate") or has one byte flipped ("corrupt").
func tamperingProxy(t *testing.T, reg *ocitest.Registry, target digest.Digest, mode string) string {
	t.Helper()
	upstream, _ := url.Parse("http://" + reg.Host)
	rp := httputil.NewSingleHostReverseProxy(upstream)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/"+target.String()) && !strings.HasSuffix(r.URL.Path, ":"+target.Encoded()) {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		switch mode {
		case "truncate":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "corrupt":
			body = bytes.Clone(body)
			body[len(body)-1] ^= 0xff
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A client that first meets an insecure registry while it is down must not
// settle on HTTPS: once the registry is back, pulls work over plain HTTP.
func TestRegistryDownThenUp(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t, ocitest.Options{})
	uri := reg.URI("updown/p:v1")
	wasm := ocitest.Wasm(policyAnnotations, 1000)
	if _, err := newClient(t, reg).Push(ctx, wasm, uri, oci.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	reg.Stop()
	c := newClient(t, reg)
	_, err := c.Pull(ctx, uri, nil)
	wantErr(t, err, oci.ErrUnreachable, reg.Host)
	reg.Restart(t)
	got, _, err := c.Fetch(ctx, uri)
	if err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("after restart: %v", err)
	}
}

// Requests go through the configured proxy (by default the environment's;
// Go never proxies loopback addresses taken from the environment, so the
// test sets the proxy explicitly): a CONNECT tunnel to the TLS registry.
func TestRegistryThroughProxy(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	var tunnels atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || r.Host != reg.Host {
			http.Error(w, "CONNECT to the registry only", http.StatusForbidden)
			return
		}
		upstream, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		tunnels.Add(1)
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			upstream.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() { _, _ = io.Copy(upstream, buf); upstream.Close() }()
		go func() { _, _ = io.Copy(conn, upstream); conn.Close() }()
	}))
	t.Cleanup(proxy.Close)
	proxyURL, _ := url.Parse(proxy.URL)
	c := newClient(t, reg, func(o *oci.Options) { o.Proxy = http.ProxyURL(proxyURL) })
	wasm := ocitest.Wasm(policyAnnotations, 500)
	uri := reg.URI("proxied/p:v1")
	if _, err := c.Push(ctx, wasm, uri, oci.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Fetch(ctx, uri)
	if err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("fetch through the proxy: %v", err)
	}
	if tunnels.Load() == 0 {
		t.Fatal("no request went through the proxy")
	}
}
