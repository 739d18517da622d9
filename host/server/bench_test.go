package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

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
