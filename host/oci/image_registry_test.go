package oci_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

// The image calls of the oci host capabilities, against a real registry
// (TLS and credentials), on a module pushed as an image.
func TestImageManifestAndConfig(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	c := newClient(t, reg)
	ctx := context.Background()
	dgst, err := c.Push(ctx, ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": "t"}, 0), reg.URI("img/app:1"), oci.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := reg.Host + "/img/app:1"
	got, err := c.ImageDigest(ctx, image)
	if err != nil || got != dgst {
		t.Fatalf("ImageDigest = %s, %v; want %s", got, err, dgst)
	}
	mt, d, raw, err := c.ImageManifest(ctx, image)
	if err != nil || d != dgst || !strings.Contains(mt, "manifest") || !json.Valid(raw) {
		t.Fatalf("ImageManifest = %s %s %s, %v", mt, d, raw, err)
	}
	m, d, cfg, err := c.ImageManifestAndConfig(ctx, image)
	if err != nil || d != dgst || string(m) != string(raw) || !json.Valid(cfg) {
		t.Fatalf("ImageManifestAndConfig = %s %s %s, %v", m, d, cfg, err)
	}
	if _, err := c.ImageDigest(ctx, reg.Host+"/img/none:1"); !errors.Is(err, oci.ErrNotFound) {
		t.Fatalf("missing image: %v", err)
	}
}
