package serve

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/builtin"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
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
	r := newResolver(config.Sources{}, &oci.Sources{})
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
		if got := builtin.IsSettingsKeyed(d); got != builtin.SettingsKeyed(name) {
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
		if builtin.IsSettingsKeyed(wasm.Digest(b)) {
			t.Errorf("%s: an example shares instances", uri)
		}
	}
	// The MAP module's bytes under a file path are the same module.
	b, _, err := m.ResolveDigest(ctx, testfixture.Path("policies/mutating-admission-policy/policy.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := builtin.Digest("mutating-admission-policy"); wasm.Digest(b) == d && !builtin.IsSettingsKeyed(d) {
		t.Error("the MAP module named by its path does not share instances")
	}
}

// TestServeResolverMasksCredentials: serve's own refusal of a plain http://
// module from a host that is not an insecure source masks the URI too.
func TestServeResolverMasksCredentials(t *testing.T) {
	r := resolveWith(&module.Resolver{AllowHTTP: true}, config.Sources{InsecureSources: []string{"other:5000"}})
	_, _, err := r.ResolveDigest(context.Background(), "http://bob:pa55word@127.0.0.1:9/x.wasm?token=tok-secret1")
	if err == nil || strings.Contains(err.Error(), "pa55word") || strings.Contains(err.Error(), "tok-secret1") ||
		!strings.Contains(err.Error(), "insecure_sources") || !strings.Contains(err.Error(), "bob:xxxxx@") {
		t.Errorf("error: %v", err)
	}
}
