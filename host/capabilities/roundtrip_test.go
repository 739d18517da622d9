package capabilities_test

import (
	"context"
	"encoding/json"
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
	settings, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": "kubernetes", "operation": "get_resource", "payload": json.RawMessage(capabilities.BenchGet)})
	review, _ := json.Marshal(map[string]any{"uid": "u", "operation": "CREATE", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"object": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "default"}}})
	req, err := admission.ParseReview(review)
	if err != nil {
		t.Fatal(err)
	}
	measure := func(name string, settings []byte, hc capabilities.HostCallFunc) time.Duration {
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
	cached := measure("cached", settings, capabilities.WarmGet(t))
	const answer = `{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"},"name":"default"}}`
	constant := measure("constant", settings, func(context.Context, string, string, string, []byte) ([]byte, error) { return []byte(answer), nil })
	none := measure("none", []byte(`{"behaviour":"accept"}`), nil)
	t.Logf("evaluation p50: no host call %v; a host call answered by a constant %v; a cached get_resource %v", none, constant, cached)
	t.Logf("cached get_resource round trip (guest to host and back) p50 ~ %v; of which the capability itself ~ %v", cached-none, cached-constant)
}
