package server

import (
	"bytes"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
)

// BenchmarkServeTraced is BenchmarkServeRealistic's capabilities-drop on the
// 5 KB Pod with tracing off and on (100% sampling, every request carrying a
// sampled traceparent, spans exported over OTLP/HTTP to a receiver in this
// process that reads them without decoding them). cpu-us/op is the process's CPU
// time per request; "handler" drives the webhook handler without the
// network, "https" sends over real HTTPS. docs/benchmarks/tracing.md.
func BenchmarkServeTraced(b *testing.B) {
	body := realisticPod(b)
	rcv := otlptest.StartHTTP(b)
	rcv.Discard()
	for _, traced := range []bool{false, true} {
		name := "off"
		var h *harness
		if traced {
			name = "on"
			h, _ = startTraced(b, rcv, reloadPolicies(b, "owner"), "OTEL_TRACES_SAMPLER", "always_on", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
		} else {
			h, _ = startTraced(b, rcv, reloadPolicies(b, "owner"), "OTEL_TRACES_EXPORTER", "none")
		}
		if (h.srv.tracer != nil) != traced {
			b.Fatalf("%s: tracer %v", name, h.srv.tracer)
		}
		check := func(resp []byte) {
			if !bytes.Contains(resp, []byte(`"patchType":"JSONPatch"`)) {
				panic(fmt.Sprintf("not a mutation: %.300s", resp))
			}
		}
		var n atomic.Uint64
		header := func(hd http.Header) { hd.Set("traceparent", fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", n.Add(1))) }
		b.Run(name+"/handler", func(b *testing.B) { benchHandler(b, h, "/validate/caps", body, header, check) })
		b.Run(name+"/https", func(b *testing.B) {
			benchHTTPS(b, h, "/validate/caps", body, header, check)
		})
	}
}
