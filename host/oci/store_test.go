package oci_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/oci"
)

// A killed process leaves its temporary file in ingest/: the next OpenStore
// removes it once it is stale, and leaves a live one alone.
func TestOpenStoreCleansStaleIngest(t *testing.T) {
	root := t.TempDir()
	if _, err := oci.OpenStore(root); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, "ingest", "blob-stale")
	live := filepath.Join(root, "ingest", "blob-live")
	for _, p := range []string{stale, live} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.OpenStore(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale ingest file kept: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("live ingest file removed: %v", err)
	}
}

func TestOpenStoreLayout(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "b")
	st, err := oci.OpenStore(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "oci-layout"))
	if err != nil || string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q, %v", b, err)
	}
	if l, err := st.List(); err != nil || len(l) != 0 {
		t.Fatalf("empty store lists %v, %v", l, err)
	}
	// A file where the store should be is an error naming it.
	file := filepath.Join(t.TempDir(), "file")
	_ = os.WriteFile(file, nil, 0o644)
	if _, err := oci.OpenStore(file); err == nil {
		t.Fatal("OpenStore on a file succeeded")
	}
}
