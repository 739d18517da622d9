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

// inputKey carries, in a traced request's context, where serveValidate
// leaves the decoded request for the server span (traceInput).
type inputKey struct{}

// traceRequest serves a webhook request inside its server span. The span's
// attributes are set once, at the end: each SetAttributes after the first
// makes the SDK copy its slice, and allocations are most of what tracing
// costs (docs/benchmarks/tracing.md).
func (s *Server) traceRequest(w http.ResponseWriter, r *http.Request, kind endpointKind) int {
	ctx := s.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, spanNames[kind], trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() { // sampled out: the context goes on, for the caller's trace
		code := s.serveValidate(w, r.WithContext(ctx), kind)
		span.End()
		return code
	}
	var in *input
	code := s.serveValidate(w, r.WithContext(context.WithValue(ctx, inputKey{}, &in)), kind)
	a := httpAttributes(make([]attribute.KeyValue, 0, 13), r, kind)
	a = append(a, attribute.Int("http.response.status_code", code))
	if code >= 500 { // a server span's 4xx is the client's error, not the server's
		span.SetStatus(codes.Error, "")
		a = append(a, attribute.String("error.type", strconv.Itoa(code)))
	}
	if in != nil {
		a = append(a, attribute.String("tollgate.request.uid", in.uid), attribute.String("tollgate.request.operation", in.operation))
		if req := in.req; req != nil {
			a = append(a, attribute.String("tollgate.request.kind", req.Kind.Kind),
				attribute.String("tollgate.request.namespace", req.Namespace), attribute.String("tollgate.request.name", req.Name))
		}
	}
	span.SetAttributes(a...)
	span.End()
	return code
}

// httpAttributes appends the HTTP server span's request attributes: the
// conventions' required ones and the caller's address (what tells one
// apiserver from another). Each attribute costs about a microsecond and
// three allocations per request on the export path, so there are no more
// (the method is always POST; the route names the endpoint, the path the
// policy).
func httpAttributes(a []attribute.KeyValue, r *http.Request, kind endpointKind) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	a = append(a, attribute.String("http.request.method", r.Method), attribute.String("http.route", routes[kind]),
		attribute.String("url.path", r.URL.Path), attribute.String("url.scheme", scheme))
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		a = append(a, attribute.String("client.address", host))
	}
	return a
}

// traceInput hands the decoded request to the server span (its uid,
// operation, kind, namespace and name).
func traceInput(ctx context.Context, in *input) {
	if p, ok := ctx.Value(inputKey{}).(**input); ok {
		*p = in
	}
}

// policySpan is the span of a policy's evaluation, from when the request
// started to wait for a worker (queued) to its answer; its zero value (not
// traced) does nothing.
type policySpan struct {
	span             trace.Span
	queued, acquired time.Time
}

// startPolicy starts the policy's span once the request got its worker (or
// was refused one), when the request is traced.
func (s *Server) startPolicy(ctx context.Context, e *entry, queued time.Time) (context.Context, policySpan) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, policySpan{}
	}
	ctx, span := s.tracer.Start(ctx, "policy "+e.cfg.ID, trace.WithTimestamp(queued))
	return ctx, policySpan{span: span, queued: queued, acquired: time.Now()}
}

// end ends the span with what the policy is and what it did: the decision
// (after admission semantics), the error reason of a failed evaluation, and
// whether a cool-down answered without running the policy. The overload
// refusal (no decision) passes reason "overloaded".
func (ps policySpan) end(e *entry, kind endpointKind, d *decision, reason string) {
	if ps.span == nil {
		return
	}
	mode := string(e.cfg.Mode)
	if kind == kindAudit {
		mode = "audit"
	}
	a := make([]attribute.KeyValue, 0, 10)
	a = append(a, attribute.String("tollgate.policy.id", e.cfg.ID), attribute.String("tollgate.policy.mode", mode),
		attribute.Float64("tollgate.policy.queue_wait", ps.acquired.Sub(ps.queued).Seconds()))
	if e.unit != nil {
		a = unitAttributes(a, e.unit)
	} else {
		a = append(a, attribute.String("tollgate.policy.execution_mode", "group"))
	}
	if d != nil {
		a = append(a, attribute.Bool("tollgate.policy.allowed", d.accepted), attribute.Bool("tollgate.policy.mutated", d.mutated))
		reason = d.reason
	}
	if reason == "cooling_down" { // set only when true: each attribute costs
		a = append(a, attribute.Bool("tollgate.policy.cooled_down", true))
	}
	if reason != "" {
		a = append(a, attribute.String("tollgate.policy.error", reason), attribute.String("error.type", reason))
		ps.span.SetStatus(codes.Error, reason)
	}
	ps.span.SetAttributes(a...)
	ps.span.End()
}

// unitAttributes appends to a what names a loaded module: how it runs and
// its digest.
func unitAttributes(a []attribute.KeyValue, u *unit) []attribute.KeyValue {
	if m, ok := u.eval.(interface{ Mode() string }); ok {
		a = append(a, attribute.String("tollgate.policy.execution_mode", m.Mode()))
	}
	if u.digest != "" {
		a = append(a, attribute.String("tollgate.policy.module.digest", u.digest))
	}
	return a
}

// runMember evaluates a group member, in a span of its own when traced.
func (s *Server) runMember(ctx context.Context, name string, u *unit, kind endpointKind, in *input) (*policy.Result, error) {
	if s.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return run(ctx, u, kind, in)
	}
	ctx, span := s.tracer.Start(ctx, "member "+name)
	res, err := run(ctx, u, kind, in)
	a := unitAttributes(append(make([]attribute.KeyValue, 0, 5), attribute.String("tollgate.policy.member", name)), u)
	if err != nil {
		reason := errorReason(err)
		a = append(a, attribute.String("tollgate.policy.error", reason), attribute.String("error.type", reason))
		span.SetStatus(codes.Error, reason)
	} else {
		a = append(a, attribute.Bool("tollgate.policy.allowed", res.Response.Accepted))
	}
	span.SetAttributes(a...)
	span.End()
	return res, err
}

// shadowSpan is the span of a shadow evaluation (shadow.go); its zero value
// (the request was not traced) does nothing.
type shadowSpan struct{ span trace.Span }

// startShadow starts the span of j's evaluation when j's request was
// traced: a new trace, linked to the request's server span, starting when
// the job was queued. The evaluation runs after the answer was written, when
// the request's trace may be complete (its server span ends right after the
// answer), so it is not a child of it; the link ties them together both
// ways in a trace viewer. The sampler follows the link (telemetry's
// followLinks): the shadow evaluation of a sampled request is sampled
// whatever the root sampler would say of the new trace.
func (s *Server) startShadow(ctx context.Context, j *shadowJob) (context.Context, shadowSpan) {
	if s.tracer == nil || !j.link.IsValid() {
		return ctx, shadowSpan{}
	}
	ctx, span := s.tracer.Start(ctx, "shadow "+j.id, trace.WithNewRoot(), trace.WithTimestamp(j.queued),
		trace.WithLinks(trace.Link{SpanContext: j.link}))
	return ctx, shadowSpan{span: span}
}

// end ends the span with the policy span's attributes (of the candidate:
// its module, its answer as it would be enforced, its failure), the shadow
// queue's wait, whether it diverged from the serving answer (divergence, ""
// for none), or why it was cut (dropped).
func (ss shadowSpan) end(j *shadowJob, started time.Time, cand answer, divergence, dropped string) {
	if ss.span == nil {
		return
	}
	e := j.sh.e
	a := make([]attribute.KeyValue, 0, 12)
	a = append(a, attribute.String("tollgate.policy.id", j.id), attribute.String("tollgate.policy.mode", string(e.cfg.Mode)),
		attribute.Float64("tollgate.policy.queue_wait", started.Sub(j.queued).Seconds()), attribute.Bool("tollgate.shadow", true))
	if e.unit != nil {
		a = unitAttributes(a, e.unit)
	} else {
		a = append(a, attribute.String("tollgate.policy.execution_mode", "group"))
	}
	if cand.resp != nil {
		a = append(a, attribute.Bool("tollgate.policy.allowed", cand.resp.Allowed), attribute.Bool("tollgate.policy.mutated", len(cand.resp.Patch) > 0))
	}
	if cand.failed != "" {
		a = append(a, attribute.String("tollgate.policy.error", cand.failed), attribute.String("error.type", cand.failed))
		ss.span.SetStatus(codes.Error, cand.failed)
	}
	if dropped != "" {
		a = append(a, attribute.String("tollgate.shadow.dropped", dropped))
	} else {
		if divergence == "" {
			divergence = "none"
		}
		a = append(a, attribute.String("tollgate.shadow.divergence", divergence))
	}
	ss.span.SetAttributes(a...)
	ss.span.End()
}

// traceDropped records, when j's request was traced, that its shadow
// evaluation was dropped when its turn came (busy, cooling_down, shutdown):
// a span from when it was queued to now. A job refused at once
// (queue_full) has none: it is counted, and an overloaded server is not
// given more work.
func (s *Server) traceDropped(j *shadowJob, reason string) {
	_, ss := s.startShadow(s.base, j)
	ss.end(j, time.Now(), answer{}, "", reason)
}
