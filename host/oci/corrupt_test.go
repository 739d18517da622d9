package oci_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

// TestCorruptedBlobReplaced: a blob of the local store whose content no
// longer hashes to its digest (same size: a flipped byte) is fetched again
// and replaced by the next pull, fetch (by tag or pinned) or bundle load fetches it again and
// replaces it, for the module layer and the manifest alike.
func TestCorruptedBlobReplaced(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t, ocitest.Options{})
	c := newClient(t, reg)
	wasm := ocitest.Wasm(policyAnnotations, 8192)
	uri := reg.URI("policies/corrupt:v1")
	dgst, err := c.Push(ctx, wasm, uri, oci.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := reg.URI("policies/corrupt@" + dgst)
	e, err := c.Pull(ctx, uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	layer := c.Store().BlobPath(digest.Digest(e.ModuleDigest))
	manifest := c.Store().BlobPath(digest.Digest(dgst))
	var bundle bytes.Buffer
	if err := c.Store().Save(&bundle, uri); err != nil {
		t.Fatal(err)
	}
	corrupt := func(t *testing.T, path string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	intact := func(t *testing.T, path string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := digest.FromBytes(b).String(); got != dgst && got != e.ModuleDigest {
			t.Errorf("%s still hashes to %s: not replaced", path, got)
		}
	}
	for _, tt := range []struct {
		name string
		blob string
		do   func() error
	}{
		{"layer, fetch by tag", layer, func() error { return fetched(c.Fetch(ctx, uri)) }},
		{"layer, pinned fetch", layer, func() error { return fetched(c.Fetch(ctx, pinned)) }},
		{"layer, pull", layer, func() error { _, err := c.Pull(ctx, uri, nil); return err }},
		{"layer, bundle load", layer, func() error { _, err := c.Store().Load(bytes.NewReader(bundle.Bytes()), 0); return err }},
		{"manifest, fetch by tag", manifest, func() error { return fetched(c.Fetch(ctx, uri)) }},
		{"manifest, pinned fetch", manifest, func() error { return fetched(c.Fetch(ctx, pinned)) }},
		{"manifest, bundle load", manifest, func() error { _, err := c.Store().Load(bytes.NewReader(bundle.Bytes()), 0); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			corrupt(t, tt.blob)
			if err := tt.do(); err != nil {
				t.Fatalf("after the corruption: %v", err)
			}
			intact(t, tt.blob)
			got, gd, err := c.Fetch(ctx, pinned)
			if err != nil || gd != dgst || !bytes.Equal(got, wasm) {
				t.Fatalf("Fetch after the repair: %d bytes, %s, %v", len(got), gd, err)
			}
		})
	}
}

// fetched is Fetch's error.
func fetched(_ []byte, _ string, err error) error { return err }
