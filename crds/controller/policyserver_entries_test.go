package controller

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

func entriesTestPolicies(n int) []v1.Policy {
	var pols []v1.Policy
	for i := range n {
		pols = append(pols, &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%03d", i), UID: types.UID(fmt.Sprint("uid-", i)), ResourceVersion: "1"},
			Spec: v1.AdmissionPolicySpec{WebhookSpec: v1.WebhookSpec{PolicyServer: "default"},
				ModuleSpec: cfgModule("registry://ghcr.io/kubewarden/policies/safe-labels:v1.0.0", `{"mandatory_labels":["owner","team"],"denied_labels":["x"]}`)}})
	}
	return pols
}

func TestEntryCache(t *testing.T) {
	var c entryCache
	pols := entriesTestPolicies(3)
	ps := cfgPS()
	same := func(what string) {
		t.Helper()
		got, _ := c.buildConfig(pols, ps, Options{})
		want, _ := buildConfig(pols, ps, Options{}, BuildPolicyEntry)
		if string(got) != string(want) {
			t.Fatalf("%s: cached build differs:\n%s\nwant\n%s", what, got, want)
		}
	}
	same("first build")
	same("from the cache")
	// A new version of a policy (same UID) is built again.
	p := pols[1].(*v1.AdmissionPolicy)
	p.Spec.Settings.Raw, p.ResourceVersion = []byte(`{"x":1}`), "2"
	same("changed policy")
	// Other capabilities change every namespaced entry.
	ps.Spec.NamespacedPoliciesCapabilities = []v1.HostCapability{"oci/*"}
	same("changed capabilities")
	// A deleted policy leaves the cache.
	pols = pols[:2]
	same("deleted policy")
	if n := len(c.m["default"]); n != 2 {
		t.Errorf("%d cached entries, want 2", n)
	}
}

// BenchmarkEntryCache: the same build as BenchmarkBuildConfig when one policy changed.
func BenchmarkEntryCache(b *testing.B) {
	var c entryCache
	pols := entriesTestPolicies(200)
	ps := cfgPS()
	c.buildConfig(pols, ps, Options{})
	p := pols[0].(*v1.AdmissionPolicy)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.ResourceVersion = fmt.Sprint(i + 2)
		c.buildConfig(pols, ps, Options{})
	}
}
