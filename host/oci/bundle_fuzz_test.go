package oci_test

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci"
)

func tarOf(files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	return buf.Bytes()
}

// FuzzLoad: a bundle from anywhere must never panic the loader or escape the store.
func FuzzLoad(f *testing.F) {
	f.Add(tarOf(map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": `{"schemaVersion":2,"manifests":[]}`}))
	f.Add(tarOf(map[string]string{"../evil": "x"}))
	f.Add(tarOf(map[string]string{"index.json": `{"manifests":[{"digest":"sha256:` + "0000000000000000000000000000000000000000000000000000000000000000" + `","annotations":{"org.opencontainers.image.ref.name":"h/r:t"}}]}`}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := oci.OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = st.Load(bytes.NewReader(b), 1<<20)
	})
}

func TestLoadRejects(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
	}{
		{"path traversal", map[string]string{"../evil": "x"}},
		{"absolute path", map[string]string{"/etc/passwd": "x"}},
		{"no index", map[string]string{"oci-layout": "{}"}},
		{"bad blob name", map[string]string{"blobs/sha256/xyz": "x"}},
		{"blob digest mismatch", map[string]string{"blobs/sha256/2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae": "not foo"}},
		{"index names a missing manifest", map[string]string{"index.json": `{"manifests":[{"digest":"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae","annotations":{"org.opencontainers.image.ref.name":"h.io/r:t"}}]}`}},
		{"index with a bad ref name", map[string]string{"index.json": `{"manifests":[{"digest":"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae","annotations":{"org.opencontainers.image.ref.name":"NOT A REF"}}]}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := oci.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Load(bytes.NewReader(tarOf(tt.files)), 0); err == nil {
				t.Fatal("Load accepted it")
			} else {
				t.Logf("error: %v", err)
			}
			if l, _ := st.List(); len(l) != 0 {
				t.Fatalf("entries added: %+v", l)
			}
		})
	}
}
