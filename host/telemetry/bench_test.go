package telemetry

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
)

// BenchmarkRequestSpans is what tracing adds to one admission request, alone: a server span
// with 11 attributes under a remote parent and a policy span with 8 (host/server's), ended and
// exported over OTLP/HTTP to a receiver in this process that reads without decoding, or over
// gRPC to one that decodes (its decoding is counted). cpu-us/op is the process's CPU time per
// request, the export's goroutine included (docs/benchmarks/tracing.md).
func BenchmarkRequestSpans(b *testing.B) {
	b.Run("http", func(b *testing.B) {
		rcv := otlptest.StartHTTP(b)
		rcv.Discard()
		benchRequestSpans(b, ProtocolHTTP, rcv.Endpoint)
	})
	b.Run("grpc", func(b *testing.B) {
		rcv := otlptest.StartGRPC(b)
		rcv.Discard()
		benchRequestSpans(b, ProtocolGRPC, rcv.Endpoint)
	})
}

func benchRequestSpans(b *testing.B, protocol, endpoint string) {
	// a queue that never drops: the spans are produced faster than any server makes them
	cfg, err := FromEnv(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", protocol,
		"OTEL_TRACES_SAMPLER", "always_on", "OTEL_BSP_MAX_QUEUE_SIZE", "1000000"))
	if err != nil {
		b.Fatal(err)
	}
	tel, err := New(context.Background(), cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	tr := tel.Tracer()
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true}))
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ReportAllocs()
	c0 := cpu()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, srv := tr.Start(parent, "POST /validate/{id}", trace.WithSpanKind(trace.SpanKindServer))
		_, pol := tr.Start(ctx, "policy caps")
		a := make([]attribute.KeyValue, 0, 10)
		a = append(a, attribute.String("tollgate.policy.id", "caps"), attribute.String("tollgate.policy.mode", "protect"),
			attribute.Float64("tollgate.policy.queue_wait", 0.0001), attribute.String("tollgate.policy.execution_mode", "kubewarden-wapc"),
			attribute.String("tollgate.policy.module.digest", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
			attribute.Bool("tollgate.policy.allowed", true), attribute.Bool("tollgate.policy.mutated", true))
		pol.SetAttributes(a...)
		pol.End()
		s := make([]attribute.KeyValue, 0, 13)
		s = append(s, attribute.String("http.request.method", "POST"), attribute.String("http.route", "/validate/{id}"),
			attribute.String("url.path", "/validate/caps"), attribute.String("url.scheme", "https"), attribute.String("client.address", "10.0.0.1"),
			attribute.Int("http.response.status_code", 200), attribute.String("tollgate.request.uid", "705ab4f5-6393-11e8-b7cc-42010a800002"),
			attribute.String("tollgate.request.operation", "CREATE"), attribute.String("tollgate.request.kind", "Pod"),
			attribute.String("tollgate.request.namespace", "default"), attribute.String("tollgate.request.name", "web-0"))
		srv.SetAttributes(s...)
		srv.End()
	}
	tel.ForceFlush(context.Background())
	if d := testutil.ToFloat64(tel.stats.droppedC.WithLabelValues(reasonQueueFull)); d > 0 {
		b.Fatalf("%v spans dropped: the figure would leave their export out", d)
	}
	b.ReportMetric(float64((cpu()-c0).Microseconds())/float64(b.N), "cpu-us/op")
}
