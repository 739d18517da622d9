package capabilities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

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
		hc   func(testing.TB) capabilities.HostCallFunc
	}{
		{"cached", func(tb testing.TB) capabilities.HostCallFunc { return capabilities.WarmGet(tb) }},
		{"constant", func(testing.TB) capabilities.HostCallFunc {
			return func(context.Context, string, string, string, []byte) ([]byte, error) { return []byte(answer), nil }
		}},
	} {
		b.Run(variant.name, func(b *testing.B) {
			hc := variant.hc(b)
			load := func(repeat int) *policy.Policy {
				settings, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": "kubernetes", "operation": "get_resource",
					"payload": json.RawMessage(capabilities.BenchGet), "repeat": repeat})
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
