package main

import (
	"context"
	"slices"
	"testing"

	"github.com/tollgate-dev/tollgate/host/builtin"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestServeModulesDigest: serve's resolver gives a built-in module's digest
// without hashing it, and it is the digest of the bytes; an embedded example
// and a file come without one (the loader hashes them). Only the
// settings-keyed built-ins share instances, whatever URI names their bytes.
func TestServeModulesDigest(t *testing.T) {
	r := serveResolver(config.Sources{}, &oci.Sources{})
	m := resolveWith(r, config.Sources{})
	ctx := context.Background()
	for _, name := range builtin.Names() {
		b, d, err := m.ResolveDigest(ctx, "builtin://"+name)
		if err != nil {
			t.Fatal(err)
		}
		if d != wasm.Digest(b) {
			t.Fatalf("builtin://%s: digest %s, the bytes hash to %s", name, d, wasm.Digest(b))
		}
		if got := shareInstances(d); got != builtin.SettingsKeyed(name) {
			t.Errorf("builtin://%s: shareInstances %v", name, got)
		}
	}
	if !slices.Contains(builtin.Names(), "mutating-admission-policy") {
		t.Fatal("the MAP built-in is not in this binary: run make policies")
	}
	for _, uri := range []string{"builtin://" + demo.Prefix + "required-labels", testfixture.Path("examples/required-labels/policy.wasm")} {
		b, d, err := m.ResolveDigest(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		if d != "" {
			t.Errorf("%s: digest %q, want none", uri, d)
		}
		if shareInstances(wasm.Digest(b)) {
			t.Errorf("%s: an example shares instances", uri)
		}
	}
	// The MAP module's bytes under a file path are the same module.
	b, _, err := m.ResolveDigest(ctx, testfixture.Path("policies/mutating-admission-policy/policy.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := builtin.Digest("mutating-admission-policy"); wasm.Digest(b) == d && !shareInstances(d) {
		t.Error("the MAP module named by its path does not share instances")
	}
}
