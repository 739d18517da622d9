package telemetry

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
)

// newTelemetry starts tracing to endpoint with the given extra variables.
func newTelemetry(t *testing.T, protocol, endpoint string, extra ...string) *Telemetry {
	t.Helper()
	cfg, err := FromEnv(env(append([]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", protocol,
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint, "OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name=kubewarden"}, extra...)...))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := New(context.Background(), cfg, Options{ServiceVersion: "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tel.Shutdown(ctx)
	})
	return tel
}

// A span reaches a real OTLP receiver over gRPC and over HTTP/protobuf,
// with its parent, its attributes and the resource.
func TestExportToReceiver(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB) *otlptest.Receiver
	}{{ProtocolGRPC, otlptest.StartGRPC}, {ProtocolHTTP, otlptest.StartHTTP}} {
		t.Run(tt.protocol, func(t *testing.T) {
			rcv := tt.start(t)
			tel := newTelemetry(t, tt.protocol, rcv.Endpoint)
			ctx, parent := tel.Tracer().Start(context.Background(), "parent", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tel.Tracer().Start(ctx, "child", trace.WithAttributes(attribute.Bool("ok", true), attribute.Bool("no", false),
				attribute.Int("n", -3), attribute.Int64("big", 1<<40), attribute.Float64("f", 0.25), attribute.String("s", "é\x00z"),
				attribute.String("empty", ""), attribute.StringSlice("list", []string{"a", "b"})))
			child.SetStatus(codes.Error, "it failed")
			child.End()
			parent.End()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tel.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			spans := rcv.WaitFor(t, 30*time.Second, "two spans", func(s []otlptest.Span) bool { return len(s) == 2 })
			byName := map[string]otlptest.Span{}
			for _, s := range spans {
				byName[s.Name] = s
			}
			p, c := byName["parent"], byName["child"]
			if c.TraceID != p.TraceID || c.ParentSpanID != p.SpanID || c.Scope != InstrumentationName || p.ParentSpanID != "" {
				t.Errorf("child %+v of parent %+v", c, p)
			}
			for k, v := range map[string]any{"ok": true, "no": false, "n": int64(-3), "big": int64(1 << 40), "f": 0.25, "s": "é\x00z", "empty": ""} {
				if c.Attributes[k] != v {
					t.Errorf("attribute %s = %#v, want %#v", k, c.Attributes[k], v)
				}
			}
			if _, ok := c.Attributes["list"]; !ok {
				t.Error("the string slice attribute is missing")
			}
			if p.Kind != tracepb.Span_SPAN_KIND_SERVER || c.Kind != tracepb.Span_SPAN_KIND_INTERNAL || c.StatusCode != tracepb.Status_STATUS_CODE_ERROR ||
				p.StatusCode != tracepb.Status_STATUS_CODE_UNSET || c.Start.IsZero() || c.End.Before(c.Start) || p.End.Before(c.End) {
				t.Errorf("kinds %v %v, status %v %v, times %v-%v in %v-%v", p.Kind, c.Kind, p.StatusCode, c.StatusCode, c.Start, c.End, p.Start, p.End)
			}
			if r := p.Resource; r["service.name"] != "tollgate" || r["service.version"] != "v9.9.9" || r["k8s.namespace.name"] != "kubewarden" {
				t.Errorf("resource %v", r)
			}
			if got := testutil.ToFloat64(tel.stats.exportedC); got != 2 {
				t.Errorf("tollgate_telemetry_spans_exported_total %v, want 2", got)
			}
		})
	}
}

// Off: no tracer (the instrumented code does nothing), no error, and a
// Shutdown that returns at once.
func TestOff(t *testing.T) {
	tel, err := New(context.Background(), Config{}, Options{})
	if err != nil || tel.Tracer() != nil {
		t.Fatalf("tracer %v, error %v", tel.Tracer(), err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var nilTel *Telemetry
	if nilTel.Tracer() != nil || nilTel.Propagator() == nil || nilTel.Collectors() != nil {
		t.Fatal("a nil Telemetry must export nothing")
	}
}

// A stalled collector never holds a span's End: the queue fills, the spans
// past it are dropped and counted, and the metric says so.
func TestStalledCollectorDropsNotBlocks(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	rcv.Stall()
	tel := newTelemetry(t, ProtocolGRPC, rcv.Endpoint, "OTEL_BSP_MAX_QUEUE_SIZE", "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5",
		"OTEL_BSP_SCHEDULE_DELAY", "50", "OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
	start := time.Now()
	const n = 1000
	for i := 0; i < n; i++ {
		_, s := tel.Tracer().Start(context.Background(), "s")
		s.End()
	}
	// 1,000 spans against a stalled collector take what 1,000 spans take:
	// a blocked End would wait for the 60 s export timeout
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("ending %d spans took %v", n, took)
	}
	dropped := testutil.ToFloat64(tel.stats.droppedC.WithLabelValues(reasonQueueFull))
	// at most a queue (10) and a batch in the stalled export (5) are held
	if dropped < n-15 {
		t.Fatalf("dropped %v spans (queue_full), want at least %d", dropped, n-15)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tel.Collectors()...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "tollgate_telemetry_spans_dropped_total"); err == nil ||
		!strings.Contains(err.Error(), `tollgate_telemetry_spans_dropped_total{reason="queue_full"}`) {
		t.Fatalf("the metric does not show the drops: %v", err)
	}
	rcv.Unstall()
}

// A collector that is gone: exports fail within their timeout, the failed
// spans are counted, and a shutdown is bounded by its context.
func TestCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, protocol := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			endpoint := "http://" + addr
			if protocol == ProtocolHTTP {
				endpoint += "/v1/traces"
			}
			tel := newTelemetry(t, protocol, endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT", "300", "OTEL_BSP_SCHEDULE_DELAY", "50")
			for i := 0; i < 3; i++ {
				_, s := tel.Tracer().Start(context.Background(), "s")
				s.End()
			}
			deadline := time.Now().Add(30 * time.Second)
			for testutil.ToFloat64(tel.stats.droppedC.WithLabelValues(reasonExportFailed)) < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("export_failed %v after 30 s, want 3", testutil.ToFloat64(tel.stats.droppedC.WithLabelValues(reasonExportFailed)))
				}
				time.Sleep(20 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			tel.Shutdown(ctx)
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("Shutdown took %v with a 2 s context", took)
			}
		})
	}
}

// The sampler of OTEL_TRACES_SAMPLER: parent-based by default (an unsampled
// caller is not traced), always_off never.
func TestSampler(t *testing.T) {
	rcv := otlptest.StartHTTP(t)
	tel := newTelemetry(t, ProtocolHTTP, rcv.Endpoint)
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true}))
	if _, s := tel.Tracer().Start(unsampled, "x"); s.IsRecording() {
		t.Error("a span under an unsampled remote parent records (want parentbased_always_on)")
	}
	if _, s := tel.Tracer().Start(context.Background(), "x"); !s.IsRecording() {
		t.Error("a root span does not record")
	}
	off := newTelemetry(t, ProtocolHTTP, rcv.Endpoint, "OTEL_TRACES_SAMPLER", "always_off")
	if _, s := off.Tracer().Start(context.Background(), "x"); s.IsRecording() {
		t.Error("always_off records")
	}
}

// The sampler follows a sampled link of a new trace (a shadow evaluation's
// span, host/server) whatever the configured sampler says of the new trace,
// and leaves everything else to it: an unsampled link, or a span with a
// parent, is decided as before.
func TestSamplerFollowsLinks(t *testing.T) {
	sc := func(sampled bool) trace.SpanContext {
		c := trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}}
		if sampled {
			c.TraceFlags = trace.FlagsSampled
		}
		return trace.NewSpanContext(c)
	}
	root := context.Background()
	child := func(sampled bool) context.Context { return trace.ContextWithRemoteSpanContext(root, sc(sampled)) }
	for _, c := range []struct {
		sampler string
		ctx     context.Context
		links   []trace.Link
		want    bool
	}{
		{"parentbased_always_off", root, nil, false},
		{"parentbased_always_off", root, []trace.Link{{SpanContext: sc(true)}}, true},
		{"parentbased_always_off", root, []trace.Link{{SpanContext: sc(false)}}, false},
		{"traceidratio", root, []trace.Link{{SpanContext: sc(true)}}, true},
		{"parentbased_always_on", root, nil, true},
		{"parentbased_always_on", child(false), []trace.Link{{SpanContext: sc(true)}}, false}, // the parent decides
		{"parentbased_always_off", child(true), nil, true},
		{"always_off", root, []trace.Link{{SpanContext: sc(true)}}, false}, // nothing at all
	} {
		s := sampler(c.sampler, 0)
		res := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: c.ctx, TraceID: trace.TraceID{3}, Name: "x", Links: c.links})
		if got := res.Decision == sdktrace.RecordAndSample; got != c.want {
			t.Errorf("%s (%s), parent %v, links %v: sampled %v, want %v", c.sampler, s.Description(),
				trace.SpanContextFromContext(c.ctx).IsValid(), len(c.links), got, c.want)
		}
	}
}
