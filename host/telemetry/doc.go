// Package telemetry is tollgate's OpenTelemetry export: from the standard
// OTEL_* environment variables ([FromEnv]) it builds, with [New], a tracer
// provider whose spans leave through a bounded batch queue to an OTLP
// collector (gRPC or HTTP/protobuf, through its own exporter, which writes the
// protobuf without intermediate objects), the W3C trace-context and baggage
// propagator, the Prometheus counters of exported and dropped spans, and,
// with OTEL_METRICS_EXPORTER=otlp, a periodic push of a Prometheus registry's
// metrics over OTLP ([Telemetry.PushMetrics], through OpenTelemetry's
// Prometheus bridge: the same instruments as /metrics).
//
// Telemetry is off unless configured: then [Telemetry.Tracer] is nil and the
// instrumented packages (host/server, host/capabilities) skip every tracing
// step, at no cost. A slow or absent collector never slows a request: a
// span that does not fit in the queue is dropped and counted
// (tollgate_telemetry_spans_dropped_total).
//
// It owns the SDK, the exporters and their configuration. It must NOT know
// about: admission requests, policies or host calls (the instrumented
// packages name their spans and attributes with the OpenTelemetry API
// alone), HTTP serving, flags or the --config file (its caller hands it the
// environment's lookup function).
package telemetry
