package enginecmp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// modules are the modules tests and benchmarks take: all but the big ones
// unless ENGINECMP_BIG=1.
func modules(t testing.TB) []*Loaded {
	t.Helper()
	var ls []*Loaded
	for _, m := range Modules {
		if m.Big && !BigModules() {
			continue
		}
		l, err := Load(m)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

// requests are the reviews of the comparison: the realistic objects, and each
// example's own fixtures that reject or take another path.
var requests = map[string][]string{
	"": {"test/testdata/reviews/pod.json", "test/testdata/reviews/deployment.json", "test/testdata/reviews/service.json"},
	"capabilities-drop": {
		"examples/capabilities-drop/testdata/pod-adds-capabilities.json",
	},
	"required-labels": {
		"examples/required-labels/testdata/pod-no-labels.json",
		"examples/required-labels/testdata/pod-denied-label.json",
	},
	"go-image-registries": {
		"examples/go-image-registries/testdata/pod-denied.json",
		"examples/go-image-registries/testdata/pod-latest.json",
	},
}

// TestSameResponse runs every module on every engine with the same requests,
// twice each in turn (the reused instances carry state from call to call),
// and requires byte-identical ValidationResponses from the engines that
// return the guest's bytes, and the same decoded answer from tollgate's
// Evaluate. It also checks that the answers are the policies' decisions
// (a rejection where the fixture is meant to be rejected, a mutation of the
// 5 KB Pod by capabilities-drop), so that engines agreeing on nothing useful
// would not pass.
func TestSameResponse(t *testing.T) {
	ctx := context.Background()
	dir := DefaultCacheDir()
	for _, m := range modules(t) {
		t.Run(m.Name, func(t *testing.T) {
			runners := map[string]Runner{}
			for _, e := range Engines {
				r, err := New(ctx, e, m, dir)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				runners[e] = r
			}
			files := append(append([]string(nil), requests[""]...), requests[m.Name]...)
			answers := map[string]string{}
			for pass := 0; pass < 2; pass++ {
				for _, f := range files {
					req, err := LoadRequest(f, m.Settings)
					if err != nil {
						t.Fatal(err)
					}
					ref, err := runners[Wazero].Validate(ctx, req)
					if err != nil {
						t.Fatalf("%s on %s: %v", f, Wazero, err)
					}
					if len(ref.Raw) == 0 {
						t.Fatalf("%s on %s: empty answer", f, Wazero)
					}
					refCanon, err := Canonical(ref)
					if err != nil {
						t.Fatalf("%s on %s: %v", f, Wazero, err)
					}
					for _, e := range Engines[1:] {
						got, err := runners[e].Validate(ctx, req)
						if err != nil {
							t.Fatalf("%s on %s: %v", f, e, err)
						}
						if got.Raw != nil {
							if err := sameBytes(ref.Raw, got.Raw); err != nil {
								t.Errorf("%s: %s and %s differ: %v", f, Wazero, e, err)
							}
							continue
						}
						c, err := Canonical(got)
						if err != nil {
							t.Fatalf("%s on %s: %v", f, e, err)
						}
						if err := sameBytes(refCanon, c); err != nil {
							t.Errorf("%s: %s and %s decode to different answers: %v", f, Wazero, e, err)
						}
					}
					if prev, ok := answers[f]; ok && prev != string(ref.Raw) {
						t.Errorf("%s: the second pass answered differently", f)
					}
					answers[f] = string(ref.Raw)
				}
			}
			checkDecisions(t, m.Name, answers)
		})
	}
}

// checkDecisions checks the answers are the policies' decisions.
func checkDecisions(t *testing.T, module string, answers map[string]string) {
	t.Helper()
	decode := func(f string) protocol.ValidationResponse {
		var r protocol.ValidationResponse
		if err := json.Unmarshal([]byte(answers[f]), &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		return r
	}
	switch module {
	case "capabilities-drop":
		r := decode("test/testdata/reviews/pod.json")
		if !r.Accepted || len(r.MutatedObject) == 0 {
			t.Errorf("the 5 KB Pod is not mutated: %.200s", answers["test/testdata/reviews/pod.json"])
		}
	case "required-labels":
		if r := decode("examples/required-labels/testdata/pod-no-labels.json"); r.Accepted {
			t.Errorf("a Pod without labels is accepted")
		}
		if r := decode("test/testdata/reviews/pod.json"); !r.Accepted {
			t.Errorf("the 5 KB Pod is rejected: %s", answers["test/testdata/reviews/pod.json"])
		}
	case "go-image-registries":
		if r := decode("examples/go-image-registries/testdata/pod-denied.json"); r.Accepted {
			t.Errorf("a Pod from a registry not allowed is accepted")
		}
	case "mutating-admission-policy":
		// The documented sidecar policy's match condition reads
		// object.spec.initContainers, which the 5 KB Pod lacks: an evaluation
		// error, and failurePolicy Fail denies (as Kubernetes does).
		if r := decode("test/testdata/reviews/pod.json"); r.Accepted || r.Message == nil || !strings.Contains(*r.Message, "no such key: initContainers") {
			t.Errorf("the 5 KB Pod: want the match condition's error, got %.300s", answers["test/testdata/reviews/pod.json"])
		}
	}
}

func sameBytes(a, b []byte) error {
	if bytes.Equal(a, b) {
		return nil
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(i-40, 0)
	return fmt.Errorf("%d and %d bytes, first difference at byte %d: %q against %q", len(a), len(b), i,
		a[lo:min(i+40, len(a))], b[lo:min(i+40, len(b))])
}

// TestSameBytesDetects checks that the comparison reports a difference.
func TestSameBytesDetects(t *testing.T) {
	if sameBytes([]byte(`{"accepted":true}`), []byte(`{"accepted":false}`)) == nil {
		t.Fatal("a difference was not reported")
	}
	if sameBytes([]byte(`{"accepted":true}`), []byte(`{"accepted":true} `)) == nil {
		t.Fatal("a trailing byte was not reported")
	}
}

// TestWasmtimeGuestError checks the waPC host on wasmtime reports a guest
// error (an unknown operation) as an error, as wapc-go does.
func TestWasmtimeGuestError(t *testing.T) {
	l, err := Load(Modules[0])
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(context.Background(), Wasmtime, l, DefaultCacheDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.(*wasmtimeRunner).inst.invoke("no-such-operation", []byte(`{}`)); err == nil {
		t.Fatal("an unknown operation succeeded")
	}
	// The instance still answers afterwards.
	req, err := LoadRequest(BenchReview, l.Settings)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Validate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkEngines runs validate on the realistic 5 KB Pod for every module on
// every engine; p50-us is the median call. `go run ./cmd/enginecmp` measures
// the engines interleaved and prints their ratios.
func BenchmarkEngines(b *testing.B) {
	ctx := context.Background()
	for _, m := range modules(b) {
		req, err := LoadRequest(BenchReview, m.Settings)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range Engines {
			b.Run(m.Name+"/"+e, func(b *testing.B) {
				r, err := New(ctx, e, m, DefaultCacheDir())
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				for k := 0; k < 20; k++ {
					if _, err := r.Validate(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				samples := make(Samples, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t := time.Now()
					if _, err := r.Validate(ctx, req); err != nil {
						b.Fatal(err)
					}
					samples = append(samples, time.Since(t))
				}
				b.StopTimer()
				b.ReportMetric(us(samples.Quantile(0.5)), "p50-us")
				if s := HostShare(r); s > 0 {
					b.ReportMetric(100*s, "host-overhead-%")
				}
			})
		}
	}
}
