package capabilities

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const benchGet = `{"api_version":"v1","kind":"Namespace","name":"default","namespace":"","disable_cache":false}`

// warmGet is a host-call function whose Namespace cache is synced.
func warmGet(b testing.TB, more ...runtime.Object) HostCallFunc {
	k, _ := fakeCluster(b, KubeOptions{}, more...)
	f := newTestHost(b, Options{Kubernetes: k}, Allow{Resources: allResources})
	if _, err := call(b, f, "kubernetes", "get_resource", benchGet); err != nil {
		b.Fatal(err)
	}
	waitSynced(b, k, nsGVR)
	waitSynced(b, k, nsGVR)
	return f
}

// BenchmarkGetResourceCached: the host side of a cached get_resource
// (decode, allow-list, cache lookup, encode, metrics).
func BenchmarkGetResourceCached(b *testing.B) {
	f := warmGet(b)
	ctx := context.Background()
	p := []byte(benchGet)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f(ctx, "kubewarden", "kubernetes", "get_resource", p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList1000Cached: list_resources_all over 1,000 cached config maps.
func BenchmarkList1000Cached(b *testing.B) {
	var objs []runtime.Object
	for i := range 1000 {
		objs = append(objs, obj("v1", "ConfigMap", fmt.Sprintf("ns%d", i%10), fmt.Sprintf("cm%d", i), map[string]string{"app": "bench"},
			map[string]any{"data": map[string]any{"key": strings.Repeat("v", 64)}}))
	}
	k, _ := fakeCluster(b, KubeOptions{}, objs...)
	f := newTestHost(b, Options{Kubernetes: k}, Allow{Resources: allResources})
	p := []byte(`{"api_version":"v1","kind":"ConfigMap","label_selector":"app=bench"}`)
	if _, err := call(b, f, "kubernetes", "list_resources_all", string(p)); err != nil {
		b.Fatal(err)
	}
	waitSynced(b, k, cmGVR)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := f(ctx, "kubewarden", "kubernetes", "list_resources_all", p)
		if err != nil || len(out) < 1000*64 {
			b.Fatal(err, len(out))
		}
	}
}

// TestGuestRoundTrip measures a cached get_resource made by a real Wasm guest
// (the misbehave fixture's hostcall behaviour): the whole evaluation with the
// host call, against the same evaluation with a host call answered by a
// constant, so that the difference is the capability's share. The numbers
// are logged (go test -v -run GuestRoundTrip); the test fails only when the
// guest does not get the object.
func TestGuestRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	mod := testfixture.Path("test/testdata/policies/misbehave/policy.wasm")
	wasmBytes, err := os.ReadFile(mod)
	if err != nil {
		t.Fatalf("%v: run make policies", err)
	}
	ctx := context.Background()
	ph, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ph.Close(ctx)
	settings, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": "kubernetes", "operation": "get_resource", "payload": json.RawMessage(benchGet)})
	review, _ := json.Marshal(map[string]any{"uid": "u", "operation": "CREATE", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"object": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "default"}}})
	req, err := admission.ParseReview(review)
	if err != nil {
		t.Fatal(err)
	}
	measure := func(name string, settings []byte, hc HostCallFunc) time.Duration {
		p, err := ph.Load(ctx, policy.Spec{ID: name, Module: wasmBytes, Settings: settings, PoolSize: 1, HostCalls: hc, HostCallsInline: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(ctx)
		var samples []time.Duration
		for i := range 2200 {
			start := time.Now()
			res, err := p.Evaluate(ctx, req)
			d := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 && hc != nil && !strings.Contains(*res.Response.Message, `"name":"default"`) {
				t.Fatalf("%s: %s", name, *res.Response.Message)
			}
			if i >= 200 {
				samples = append(samples, d)
			}
		}
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		return samples[len(samples)/2]
	}
	cached := measure("cached", settings, warmGet(t))
	const answer = `{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"},"name":"default"}}`
	constant := measure("constant", settings, func(context.Context, string, string, string, []byte) ([]byte, error) { return []byte(answer), nil })
	none := measure("none", []byte(`{"behaviour":"accept"}`), nil)
	t.Logf("evaluation p50: no host call %v; a host call answered by a constant %v; a cached get_resource %v", none, constant, cached)
	t.Logf("cached get_resource round trip (guest to host and back) p50 ~ %v; of which the capability itself ~ %v", cached-none, cached-constant)
}

// BenchmarkGetResourceCachedWithDeadline: the same, under an evaluation
// deadline (the backend call gets a derived one).
func BenchmarkGetResourceCachedWithDeadline(b *testing.B) {
	f := warmGet(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	p := []byte(benchGet)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f(ctx, "kubewarden", "kubernetes", "get_resource", p); err != nil {
			b.Fatal(err)
		}
	}
}
