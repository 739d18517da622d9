package capabilities

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClusterListAndPluralName(t *testing.T) {
	k, _ := fakeCluster(t, KubeOptions{MaxCachedObjects: -1})
	h := New(Options{Kubernetes: k})
	t.Cleanup(h.Close)
	c := h.Cluster("rego", []Resource{{"v1", "Namespace"}, {"apps/v1", "Deployment"}, {"v1", "ConfigMap"}, {"v1", "Namespace"}})
	if got, want := c.Resources(), []Resource{{"apps/v1", "Deployment"}, {"v1", "ConfigMap"}, {"v1", "Namespace"}}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("Resources() = %v, want %v (sorted by apiVersion then kind, no duplicates)", got, want)
	}
	ctx := context.Background()
	b, err := c.ListAll(ctx, Resource{"v1", "Namespace"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"v1","kind":"NamespaceList","metadata":{},"items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"},"name":"default"}},{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}]}`
	if got := noRV(string(b)); got != want {
		t.Fatalf("ListAll:\ngot  %s\nwant %s", got, want)
	}
	for r, want := range map[Resource]string{{"v1", "ConfigMap"}: "configmaps", {"apps/v1", "Deployment"}: "deployments"} {
		got, err := c.PluralName(ctx, r)
		if err != nil || got != want {
			t.Errorf("PluralName(%v) = %q, %v; want %q", r, got, err, want)
		}
	}
	// A resource the policy is not granted is refused, as a guest's call would be.
	_, err = c.ListAll(ctx, Resource{"v1", "Secret"})
	wantErr(t, err, "Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported.")
	_, err = c.PluralName(ctx, Resource{"v1", "Secret"})
	wantErr(t, err, "Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported.")
	// A granted kind the cluster does not know.
	c2 := h.Cluster("rego", []Resource{{"example.com/v1", "Widget"}})
	_, err = c2.PluralName(ctx, Resource{"example.com/v1", "Widget"})
	wantErr(t, err, "Cannot find resource example.com/v1/Widget")
	if _, ok := c.Version(Resource{"v1", "Namespace"}); ok {
		t.Error("Version: ok without caches")
	}
}

// TestClusterVersion: the change signal is there once the resource's cache
// has synced, and moves with every add, update and delete.
func TestClusterVersion(t *testing.T) {
	k, dyn := fakeCluster(t, KubeOptions{})
	h := New(Options{Kubernetes: k})
	t.Cleanup(h.Close)
	cm := Resource{"v1", "ConfigMap"}
	c := h.Cluster("rego", []Resource{cm})
	ctx := context.Background()
	if _, ok := c.Version(cm); ok {
		t.Fatal("Version: ok before any list (no cache yet)")
	}
	if _, err := c.ListAll(ctx, cm); err != nil { // starts the cache
		t.Fatal(err)
	}
	waitSynced(t, k, cmGVR)
	v0, ok := c.Version(cm)
	if !ok {
		t.Fatal("Version: not ok with a synced cache")
	}
	if v, _ := c.Version(cm); v != v0 {
		t.Fatalf("Version moved without a change: %d then %d", v0, v)
	}
	changed := func(what string, prev uint64) uint64 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if v, ok := c.Version(cm); ok && v != prev {
				return v
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("Version did not change after %s", what)
		return 0
	}
	cms := dyn.Resource(cmGVR).Namespace("default")
	if _, err := cms.Create(ctx, obj("v1", "ConfigMap", "default", "four", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := changed("a create", v0)
	u := obj("v1", "ConfigMap", "default", "four", map[string]string{"new": "label"}, nil)
	if _, err := cms.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v2 := changed("an update", v1)
	if err := cms.Delete(ctx, "four", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	changed("a delete", v2)
	// The list answers from the cache what the signal says.
	b, err := c.ListAll(ctx, cm)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"four"`) {
		t.Fatalf("the deleted object is still listed: %s", b)
	}
}

// TestClusterRecordReplay: a recording holds the requests kwctl records for
// a context-aware Rego evaluation, and replays.
func TestClusterRecordReplay(t *testing.T) {
	k, _ := fakeCluster(t, KubeOptions{MaxCachedObjects: -1})
	path := filepath.Join(t.TempDir(), "session.yml")
	rec, err := NewRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Kubernetes: k, Record: rec})
	ns := Resource{"v1", "Namespace"}
	c := h.Cluster("rego", []Resource{ns})
	ctx := context.Background()
	list, err := c.ListAll(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Version(ns); ok || c.CachesPluralNames() {
		t.Error("recording: Version ok or plural names cached; every evaluation must make its requests")
	}
	if name, err := c.PluralName(ctx, ns); err != nil || name != "namespaces" {
		t.Fatalf("PluralName = %q, %v", name, err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"!KubernetesListResourceAll\n    api_version: v1\n    kind: Namespace\n    label_selector: null\n    field_selector: null\n    disable_cache: false\n    field_masks: null\n",
		"!KubernetesGetResourcePluralName\n    api_version: v1\n    kind: Namespace\n",
		`payload: '"namespaces"'`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the session lacks %q:\n%s", want, b)
		}
	}

	r, err := LoadSession(path)
	if err != nil {
		t.Fatal(err)
	}
	h2 := New(Options{Replay: r})
	c2 := h2.Cluster("rego", []Resource{ns})
	got, err := c2.ListAll(ctx, ns)
	if err != nil || string(got) != string(list) {
		t.Fatalf("replayed list = %s, %v; want %s", got, err, list)
	}
	if name, err := c2.PluralName(ctx, ns); err != nil || name != "namespaces" {
		t.Fatalf("replayed PluralName = %q, %v", name, err)
	}
	if _, err := c2.ListAll(ctx, ns); err == nil || !strings.Contains(err.Error(), "the list of recorded responses is empty") {
		t.Fatalf("a list past the session's end: %v", err)
	}
	// Out of order: the plural name first.
	r, _ = LoadSession(path)
	c3 := New(Options{Replay: r}).Cluster("rego", []Resource{ns})
	if _, err := c3.PluralName(ctx, ns); err == nil || !strings.Contains(err.Error(), "Replay error: unexpected request. Was expecting KubernetesListResourceAll") {
		t.Fatalf("out of order: %v", err)
	}
}
