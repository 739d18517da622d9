package oci_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

// Many goroutines and two clients (as two processes would) pull into one
// store at once: every pull succeeds, the index keeps every entry, and each
// module reads back intact.
func TestConcurrentPullsShareOneStore(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t, ocitest.Options{})
	store := filepath.Join(t.TempDir(), "store")
	a := newClient(t, reg, withStore(store))
	b := newClient(t, reg, withStore(store))
	const n = 6
	mods := map[string][]byte{}
	for i := range n {
		uri := reg.URI(fmt.Sprintf("conc/p%d:v1", i))
		mods[uri] = ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": fmt.Sprint(i)}, 50_000+i)
		if _, err := a.Push(ctx, mods[uri], uri, oci.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for uri, want := range mods {
		for _, c := range []*oci.Client{a, a, b, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, _, err := c.Fetch(ctx, uri)
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("%s: wrong bytes", uri)
				}
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := a.Store().List()
	if err != nil || len(list) != n {
		t.Fatalf("index has %d entries (%v), want %d", len(list), err, n)
	}
	// Each module has its manifest and layer; the "{}" config blob is shared;
	// nothing is left in ingest/.
	if files := storeFiles(t, store); len(files) != 2*n+1 {
		t.Fatalf("store files: %v", files)
	}
}
