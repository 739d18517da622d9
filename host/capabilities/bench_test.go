package capabilities

import (
	"bytes"
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

// BenchmarkGuestRoundTrip measures what a cached get_resource costs a real
// Wasm guest (the misbehave fixture, TinyGo): the guest makes the call
// once, or 21 times, in the same evaluation, and the difference of the two
// evaluations' p50, over 20, is one call's round trip (guest to host and
// back, the capability, the answer copied into the guest), free of the
// evaluation's own costs. The evaluations alternate, so both see the same
// machine. Reported: p50-1call-us, p50-21calls-us and roundtrip-us; the
// "constant" variant answers with a constant instead of the capability.
// Issue 12's target: roundtrip-us <= 20 for "cached".
func BenchmarkGuestRoundTrip(b *testing.B) {
	mod := testfixture.Path("test/testdata/policies/misbehave/policy.wasm")
	wasmBytes, err := os.ReadFile(mod)
	if err != nil {
		b.Fatalf("%v: run make policies", err)
	}
	ctx := context.Background()
	ph, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer ph.Close(ctx)
	review, _ := json.Marshal(map[string]any{"uid": "u", "operation": "CREATE", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"object": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "default"}}})
	req, err := admission.ParseReview(review)
	if err != nil {
		b.Fatal(err)
	}
	const answer = `{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"},"name":"default"}}`
	for _, variant := range []struct {
		name string
		hc   func(testing.TB) HostCallFunc
	}{
		{"cached", func(tb testing.TB) HostCallFunc { return warmGet(tb) }},
		{"constant", func(testing.TB) HostCallFunc {
			return func(context.Context, string, string, string, []byte) ([]byte, error) { return []byte(answer), nil }
		}},
	} {
		b.Run(variant.name, func(b *testing.B) {
			hc := variant.hc(b)
			load := func(repeat int) *policy.Policy {
				settings, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": "kubernetes", "operation": "get_resource",
					"payload": json.RawMessage(benchGet), "repeat": repeat})
				p, err := ph.Load(ctx, policy.Spec{ID: fmt.Sprint(variant.name, repeat), Module: wasmBytes, Settings: settings, PoolSize: 1, HostCalls: hc, HostCallsInline: true})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { p.Close(ctx) })
				return p
			}
			one, many := load(1), load(21)
			eval := func(p *policy.Policy) time.Duration {
				start := time.Now()
				res, err := p.Evaluate(ctx, req)
				d := time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if !strings.Contains(*res.Response.Message, `"name":"default"`) {
					b.Fatalf("the guest did not get the object: %s", *res.Response.Message)
				}
				return d
			}
			for range 200 { // warm-up: instances, caches, branch predictors
				eval(one)
				eval(many)
			}
			var d1, d21 []time.Duration
			for b.Loop() {
				d1 = append(d1, eval(one))
				d21 = append(d21, eval(many))
			}
			p50 := func(ds []time.Duration) time.Duration {
				sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
				return ds[len(ds)/2]
			}
			m1, m21 := p50(d1), p50(d21)
			b.ReportMetric(float64(m1.Nanoseconds())/1e3, "p50-1call-us")
			b.ReportMetric(float64(m21.Nanoseconds())/1e3, "p50-21calls-us")
			b.ReportMetric(float64((m21-m1).Nanoseconds())/20/1e3, "roundtrip-us")
		})
	}
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

// BenchmarkList1000CachedMasked: the same list with field_masks, as
// examples/unique-ingress-host asks it (the masked encodings are cached per
// object version and mask set).
func BenchmarkList1000CachedMasked(b *testing.B) {
	var objs []runtime.Object
	for i := range 1000 {
		objs = append(objs, obj("v1", "ConfigMap", fmt.Sprintf("ns%d", i%10), fmt.Sprintf("cm%d", i), map[string]string{"app": "bench"},
			map[string]any{"data": map[string]any{"key": strings.Repeat("v", 64), "other": strings.Repeat("w", 64)}}))
	}
	k, _ := fakeCluster(b, KubeOptions{}, objs...)
	f := newTestHost(b, Options{Kubernetes: k}, Allow{Resources: allResources})
	p := []byte(`{"api_version":"v1","kind":"ConfigMap","label_selector":"app=bench","field_masks":["data.key"]}`)
	if _, err := call(b, f, "kubernetes", "list_resources_all", string(p)); err != nil {
		b.Fatal(err)
	}
	waitSynced(b, k, cmGVR)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := f(ctx, "kubewarden", "kubernetes", "list_resources_all", p)
		if err != nil || len(out) < 1000*64 || bytes.Contains(out, []byte("wwww")) {
			b.Fatal(err, len(out))
		}
	}
}
