package server

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate-dev/tollgate/host/policy"
)

// The spans of a webhook request (Options.Tracer): a server span per request,
// continuing the caller's trace context (the apiserver sends W3C
// traceparent when its tracing is on), a child span per policy evaluation,
// one per group member, and host/capabilities' spans under them. Nothing
// here runs when s.tracer is nil, and no span carries the object, the
// settings or a message. Attribute names: docs/server.md "Tracing".

// routes and spanNames by endpointKind: HTTP server semantic conventions
// name a server span "METHOD route".
var (
	routes    = [...]string{"/validate/{id}", "/audit/{id}", "/validate_raw/{id}"}
	spanNames = [...]string{"POST /validate/{id}", "POST /audit/{id}", "POST /validate_raw/{id}"}
)

// defaultPropagator reads W3C trace context and baggage.
var defaultPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// traceRequest serves a webhook request inside its server span.
func (s *Server) traceRequest(w http.ResponseWriter, r *http.Request, kind endpointKind) int {
	ctx := s.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, spanNames[kind], trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(httpAttributes(r, routes[kind])...)
		span.SetAttributes(attribute.String("tollgate.endpoint", kind.String()), attribute.String("tollgate.policy.id", r.PathValue("id")))
	}
	code := s.serveValidate(w, r.WithContext(ctx), kind)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 { // a server span's 4xx is the client's error, not the server's
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String("error.type", strconv.Itoa(code)))
		}
	}
	span.End()
	return code
}

// httpAttributes are the HTTP server span's request attributes.
func httpAttributes(r *http.Request, route string) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	proto := "1.1"
	if r.ProtoMajor == 2 {
		proto = "2"
	}
	a := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
		attribute.String("url.path", r.URL.Path), attribute.String("url.scheme", scheme),
		attribute.String("network.protocol.version", proto)}
	if host, port, err := net.SplitHostPort(r.Host); err == nil {
		a = append(a, attribute.String("server.address", host))
		if p, err := strconv.Atoi(port); err == nil {
			a = append(a, attribute.Int("server.port", p))
		}
	} else if r.Host != "" {
		a = append(a, attribute.String("server.address", r.Host))
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		a = append(a, attribute.String("client.address", host))
	}
	if ua := r.UserAgent(); ua != "" {
		a = append(a, attribute.String("user_agent.original", ua))
	}
	if r.ContentLength >= 0 {
		a = append(a, attribute.Int64("http.request.body.size", r.ContentLength))
	}
	return a
}

// traceInput adds the decoded request's identity to the server span.
func traceInput(ctx context.Context, in *input) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	a := []attribute.KeyValue{attribute.String("tollgate.request.uid", in.uid), attribute.String("tollgate.request.operation", in.operation)}
	if req := in.req; req != nil {
		apiVersion := req.Kind.Version
		if req.Kind.Group != "" {
			apiVersion = req.Kind.Group + "/" + apiVersion
		}
		a = append(a, attribute.String("tollgate.request.kind", req.Kind.Kind), attribute.String("tollgate.request.api_version", apiVersion),
			attribute.String("tollgate.request.resource", req.Resource.Resource),
			attribute.String("tollgate.request.namespace", req.Namespace), attribute.String("tollgate.request.name", req.Name))
	}
	span.SetAttributes(a...)
}

// startPolicy starts the span of a policy's evaluation, begun when the
// request started to wait for a worker (queued); nil when the request is not
// traced.
func (s *Server) startPolicy(ctx context.Context, e *entry, kind endpointKind, queued time.Time) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	mode := string(e.cfg.Mode)
	if kind == kindAudit {
		mode = "audit"
	}
	a := []attribute.KeyValue{attribute.String("tollgate.policy.id", e.cfg.ID), attribute.String("tollgate.policy.mode", mode),
		attribute.Float64("tollgate.policy.queue_wait", time.Since(queued).Seconds())}
	if e.unit != nil {
		a = append(a, unitAttributes(e.unit)...)
	} else {
		a = append(a, attribute.String("tollgate.policy.execution_mode", "group"))
	}
	return s.tracer.Start(ctx, "policy "+e.cfg.ID, trace.WithTimestamp(queued), trace.WithAttributes(a...))
}

// unitAttributes name a loaded module: how it runs and its digest.
func unitAttributes(u *unit) []attribute.KeyValue {
	var a []attribute.KeyValue
	if m, ok := u.eval.(interface{ Mode() string }); ok {
		a = append(a, attribute.String("tollgate.policy.execution_mode", m.Mode()))
	}
	if u.digest != "" {
		a = append(a, attribute.String("tollgate.policy.module.digest", u.digest))
	}
	return a
}

// endPolicy ends a policy span with its outcome: the decision (after
// admission semantics), the error reason of a failed evaluation, and
// whether a cool-down answered without running the policy. The overload
// refusal (no decision) passes reason "overloaded".
func endPolicy(span trace.Span, d *decision, reason string) {
	if span == nil {
		return
	}
	if d != nil {
		span.SetAttributes(attribute.Bool("tollgate.policy.allowed", d.accepted), attribute.Bool("tollgate.policy.mutated", d.mutated))
		reason = d.reason
	}
	span.SetAttributes(attribute.Bool("tollgate.policy.cooled_down", reason == "cooling_down"))
	if reason != "" {
		span.SetAttributes(attribute.String("tollgate.policy.error", reason), attribute.String("error.type", reason))
		span.SetStatus(codes.Error, reason)
	}
	span.End()
}

// runMember evaluates a group member, in a span of its own when traced.
func (s *Server) runMember(ctx context.Context, name string, u *unit, kind endpointKind, in *input) (res *policy.Result, err error) {
	if s.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return run(ctx, u, kind, in)
	}
	a := append([]attribute.KeyValue{attribute.String("tollgate.policy.member", name)}, unitAttributes(u)...)
	ctx, span := s.tracer.Start(ctx, "member "+name, trace.WithAttributes(a...))
	defer span.End()
	res, err = run(ctx, u, kind, in)
	if err != nil {
		reason := errorReason(err)
		span.SetAttributes(attribute.String("tollgate.policy.error", reason), attribute.String("error.type", reason))
		span.SetStatus(codes.Error, reason)
		return res, err
	}
	span.SetAttributes(attribute.Bool("tollgate.policy.allowed", res.Response.Accepted))
	return res, nil
}
