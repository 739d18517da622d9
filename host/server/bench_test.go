package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
)

// BenchmarkEvaluate measures the whole handler path (decode, evaluate the
// real Wasm policy, semantics, encode) without the network.
func BenchmarkEvaluate(b *testing.B) {
	for _, tc := range []struct{ id, body string }{
		{"labels", string(reviewFor("b", "CREATE", "default", pod(map[string]string{"owner": "x"})))},
		{"caps", string(reviewFor("b", "CREATE", "default", pod(map[string]string{"owner": "x"}, "NET_ADMIN")))},
	} {
		b.Run(tc.id, func(b *testing.B) {
			h := start(b, harnessOpts{policies: reloadPolicies(b, "owner"), noStart: true, options: func(o *config.Options) { o.Workers = 2 }})
			defer h.srv.Shutdown(context.Background())
			handler := h.srv.webhookHandler()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					w := &discardWriter{h: http.Header{}}
					r, _ := http.NewRequest("POST", "/validate/"+tc.id, strings.NewReader(tc.body))
					handler.ServeHTTP(w, r)
					if w.code != 200 {
						panic(fmt.Sprintf("HTTP %d", w.code))
					}
				}
			})
		})
	}
}

type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) {
	if d.code == 0 {
		d.code = 200
	}
	return len(b), nil
}
func (d *discardWriter) WriteHeader(c int) { d.code = c }

// BenchmarkShadowCost measures what a shadow (policies.yml shadow:) costs
// the serving path: the whole handler path of the validating TinyGo example,
// one request at a time (so the shadow, which runs after the answer on a
// shadow worker, is evaluated for every request, as at a moderate rate),
// without and with a shadow that diverges on every request, in alternating
// rounds. It reports the p50 and p99 of the serving path per request and the
// shadow evaluations that ran; ns/op is the mean.
func BenchmarkShadowCost(b *testing.B) {
	labels := wasmPath(b, "examples/required-labels")
	plain := fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [owner]}\n", labels)
	shadowed := plain + "  shadow:\n    settings: {mandatory_labels: [owner, cost-center]}\n"
	body := string(reviewFor("b", "CREATE", "default", pod(map[string]string{"owner": "x"})))
	for round := 1; round <= 3; round++ {
		for _, tc := range []struct{ name, policies string }{{"without", plain}, {"with", shadowed}} {
			b.Run(fmt.Sprintf("%s/round%d", tc.name, round), func(b *testing.B) {
				h := start(b, harnessOpts{policies: tc.policies, noStart: true, options: func(o *config.Options) { o.Workers = 2 }})
				defer h.srv.Shutdown(context.Background())
				if tc.name == "with" {
					deadline := time.Now().Add(time.Minute)
					for sh := h.srv.cur.Load().shadows["labels"]; sh == nil || !sh.ready(); sh = h.srv.cur.Load().shadows["labels"] {
						if time.Now().After(deadline) {
							b.Fatal("the shadow did not load")
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
				handler := h.srv.webhookHandler()
				took := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					w := &discardWriter{h: http.Header{}}
					r, _ := http.NewRequest("POST", "/validate/labels", strings.NewReader(body))
					handler.ServeHTTP(w, r)
					took = append(took, time.Since(t0))
					if w.code != 200 {
						b.Fatalf("HTTP %d", w.code)
					}
				}
				b.StopTimer()
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
				if sh := h.srv.cur.Load().shadows["labels"]; sh != nil {
					b.ReportMetric(float64(sh.st.evaluations.Load())/float64(b.N), "shadows/op")
				}
			})
		}
	}
}
