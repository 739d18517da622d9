package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options are what the caller adds to the Config.
type Options struct {
	// Logger receives export failures (at most one line a minute) and
	// the configuration in use (nil discards).
	Logger *slog.Logger
	// ServiceVersion is service.version ("" for none).
	ServiceVersion string
}

// Telemetry is the running export. Its zero value (and a nil *Telemetry)
// exports nothing.
type Telemetry struct {
	tp       *sdktrace.TracerProvider // nil when traces are off
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	stats    *stats
	res      *resource.Resource
	cfg      Config
	log      *slog.Logger
	shutdown []func(context.Context) error
	// metricExp is the OTLP metric exporter until PushMetrics uses it
	// (nil without OTEL_METRICS_EXPORTER=otlp).
	metricExp sdkmetric.Exporter
}

// InstrumentationName names tollgate's tracer (the instrumentation scope).
const InstrumentationName = "github.com/tollgate-dev/tollgate"

// New starts what cfg asks for. It fails only on a configuration the
// exporters refuse; it never waits for a collector (the first export finds
// out whether one is there).
func New(ctx context.Context, cfg Config, o Options) (*Telemetry, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Telemetry{cfg: cfg, log: o.Logger, stats: newStats(), prop: propagator(cfg.Propagators)}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName),
		attribute.String("telemetry.sdk.name", "opentelemetry"), attribute.String("telemetry.sdk.language", "go"),
		attribute.String("telemetry.sdk.version", sdk.Version())}
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	for _, a := range cfg.Resource {
		attrs = append(attrs, attribute.String(a.Key, a.Value))
	}
	t.res = resource.NewSchemaless(attrs...)
	if cfg.Traces {
		exp, err := spanExporter(cfg.TracesExport, t.res)
		if err != nil {
			return nil, err
		}
		b := newBatcher(exp, cfg, cfg.TracesExport.Timeout, t.stats, o.Logger)
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(t.res), sdktrace.WithSampler(sampler(cfg.Sampler, cfg.SamplerArg)),
			sdktrace.WithSpanProcessor(b))
		t.tracer = t.tp.Tracer(InstrumentationName)
		t.shutdown = append(t.shutdown, t.tp.Shutdown)
		o.Logger.Info("exporting traces over OTLP", "protocol", cfg.TracesExport.Protocol, "endpoint", cfg.TracesExport.Endpoint,
			"sampler", cfg.Sampler, "sampler_arg", cfg.SamplerArg, "queue", cfg.QueueSize, "service", cfg.ServiceName)
	}
	if cfg.Metrics {
		exp, err := metricExporter(ctx, cfg.MetricsExport)
		if err != nil {
			t.Shutdown(ctx)
			return nil, err
		}
		t.metricExp = exp
		// the SDK reports a failed metric push to the global error handler
		// (the trace batcher reports its own): to the log, once a minute
		otel.SetErrorHandler(&errorLog{log: o.Logger})
		t.shutdown = append(t.shutdown, func(ctx context.Context) error {
			if t.metricExp != nil { // never pushed: only the exporter to close
				return t.metricExp.Shutdown(ctx)
			}
			return nil
		})
	}
	return t, nil
}

// spanExporter is the OTLP exporter of e: tollgate's own, which writes the
// protobuf straight from the spans (otlphttp.go, otlpgrpc.go).
func spanExporter(e Export, res *resource.Resource) (sdktrace.SpanExporter, error) {
	if e.Protocol == ProtocolGRPC {
		return newGRPCExporter(e, encoder{res: res})
	}
	return newHTTPExporter(e, res)
}

// sampler is the SDK sampler of OTEL_TRACES_SAMPLER, following links
// (followLinks) but for always_off, which samples nothing.
func sampler(name string, arg float64) sdktrace.Sampler {
	if name == "always_off" {
		return sdktrace.NeverSample()
	}
	return followLinks{rootSampler(name, arg)}
}

// followLinks samples a new trace that links to a sampled span as that span
// was sampled, and leaves every other decision to the configured sampler.
// tollgate starts such traces for work it does for a request after
// answering it (a shadow evaluation, host/server): it is traced when the
// request is, whatever the root sampler would say of the new trace id
// (parentbased_always_off would never sample it, a ratio a share of it).
type followLinks struct{ sdktrace.Sampler }

func (f followLinks) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return f.Sampler.ShouldSample(p)
}

func (f followLinks) Description() string { return "FollowLinks{" + f.Sampler.Description() + "}" }

// rootSampler is the SDK sampler named by OTEL_TRACES_SAMPLER.
func rootSampler(name string, arg float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(arg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(arg))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// propagator is OTEL_PROPAGATORS'.
func propagator(names []string) propagation.TextMapPropagator {
	var ps []propagation.TextMapPropagator
	for _, n := range names {
		switch n {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...)
}

// Tracer is the tracer of tollgate's spans; nil when traces are off, which
// instrumented code takes as "do nothing".
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Propagator reads (and writes) the trace context carried by requests:
// OTEL_PROPAGATORS, W3C trace context and baggage by default.
func (t *Telemetry) Propagator() propagation.TextMapPropagator {
	if t == nil || t.prop == nil {
		return propagator([]string{"tracecontext", "baggage"})
	}
	return t.prop
}

// Collectors are the export's Prometheus metrics (spans exported and
// dropped), for /metrics.
func (t *Telemetry) Collectors() []prometheus.Collector {
	if t == nil || t.stats == nil {
		return nil
	}
	return t.stats.collectors()
}

// ForceFlush sends the spans queued now and waits for them (or ctx).
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown sends what is queued, within ctx, and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	t.shutdown = nil
	return errors.Join(errs...)
}

// errorLog is the OpenTelemetry error handler: the SDK's errors (a failed
// metric push) to the log, at most one a minute.
type errorLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
}

func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now := time.Now(); now.Sub(e.last) >= time.Minute {
		e.last = now
		e.log.Warn("OpenTelemetry export failed (logged once a minute)", "error", err)
	}
}

// Span drop reasons.
const (
	reasonQueueFull    = "queue_full"
	reasonExportFailed = "export_failed"
)

// stats are the export's Prometheus counters.
type stats struct {
	exportedC prometheus.Counter
	droppedC  *prometheus.CounterVec
}

func newStats() *stats {
	s := &stats{
		exportedC: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_telemetry_spans_exported_total",
			Help: "Spans the OTLP collector accepted."}),
		droppedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_telemetry_spans_dropped_total",
			Help: "Spans not exported: queue_full (the export queue was full: the collector is slow or down) or export_failed (the collector refused them or did not answer in time)."},
			[]string{"reason"}),
	}
	// the series exist from the start: a rate over them needs no first drop
	s.droppedC.WithLabelValues(reasonQueueFull)
	s.droppedC.WithLabelValues(reasonExportFailed)
	return s
}

func (s *stats) dropped(reason string, n int) { s.droppedC.WithLabelValues(reason).Add(float64(n)) }
func (s *stats) exported(n int)               { s.exportedC.Add(float64(n)) }
func (s *stats) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.exportedC, s.droppedC}
}
