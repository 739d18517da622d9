package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/group"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

type endpointKind int

const (
	kindValidate endpointKind = iota
	kindAudit
	kindRaw
)

func (k endpointKind) String() string {
	return [...]string{"validate", "audit", "validate_raw"}[k]
}

// input is a decoded request.
type input struct {
	uid       string
	operation string
	namespace string
	req       *admission.Request // validate and audit
	raw       []byte             // validate_raw: the value of "request"
}

// decision is the outcome of one evaluation.
type decision struct {
	resp     *admission.Response
	accepted bool
	mutated  bool
	costly   bool   // the evaluation hit its deadline or memory limit
	reason   string // why the evaluation failed (errorReason), "" when it ran
	// enforced is the answer before monitor mode (resp in protect mode), what
	// a shadow's answer is compared with.
	enforced *admission.Response
}

func (s *Server) handleValidate(w http.ResponseWriter, r *http.Request, kind endpointKind) {
	var code int
	if s.tracer != nil {
		code = s.traceRequest(w, r, kind)
	} else {
		code = s.serveValidate(w, r, kind)
	}
	s.m.requests.WithLabelValues(kind.String(), strconv.Itoa(code)).Inc()
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) int {
	http.Error(w, fmt.Sprintf(format, args...), code)
	return code
}

func (s *Server) serveValidate(w http.ResponseWriter, r *http.Request, kind endpointKind) int {
	id := r.PathValue("id")
	// wait at most half the read timeout, which also runs while the body waits:
	// the rest is for reading it, or the wait ends in a read error, not a 503
	h2 := r.ProtoMajor == 2
	share, err := s.bodies.acquire(r.Context(), r.ContentLength, min(s.opts.PolicyTimeout, s.opts.ReadTimeout/2), h2)
	if err != nil {
		// Read the body to its end, without keeping it: closing the connection on an
		// unread body resets it, and an HTTP/1.1 client still writing then loses the 503.
		// An HTTP/2 stream is reset alone, after the answer, dropping what it sent.
		if !h2 {
			_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes))
		}
		s.m.overloaded.Inc()
		w.Header().Set("Retry-After", "1")
		return httpError(w, http.StatusServiceUnavailable, "policy server overloaded: %v", err)
	}
	defer share.done() // the body and its decoded form live until the answer
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes), r.ContentLength, s.opts.MaxRequestBytes)
	share.fit(len(body))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return httpError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", mbe.Limit)
		}
		return httpError(w, http.StatusBadRequest, "reading the request body: %v", err)
	}
	in, err := decodeInput(kind, body)
	if err != nil {
		return httpError(w, http.StatusBadRequest, "%s/%s: %v", kind, id, err)
	}
	log := requestLog(s.log, id, in.uid, kind.String())
	if s.tracer != nil {
		traceInput(r.Context(), in)
	}

	if kind == kindValidate && s.opts.AlwaysAcceptNamespace != "" && in.namespace == s.opts.AlwaysAcceptNamespace {
		s.m.acceptedByNsTot.Inc()
		return s.write(w, kind, http.StatusOK, &admission.Response{UID: in.uid, Allowed: true})
	}

	set := s.acquire()
	defer set.release()
	e, ok := set.entries[id]
	if !ok {
		return httpError(w, http.StatusNotFound, "no policy %q in the serving configuration", id)
	}
	if e.placeholder() {
		w.Header().Set("Retry-After", "5")
		return s.write(w, kind, http.StatusServiceUnavailable,
			admission.Errored(in.uid, http.StatusServiceUnavailable, fmt.Errorf("policy %s is still loading", id)))
	}
	if e.err != nil {
		log.Warn("request for a policy that failed to load", "error", briefError(e.err.Error()))
		return s.write(w, kind, http.StatusInternalServerError,
			admission.Errored(in.uid, http.StatusInternalServerError, errors.New(userMessage("policy "+id+" is not loaded: ", id, e.err))))
	}

	ctx, queued := r.Context(), time.Time{}
	if s.tracer != nil {
		queued = time.Now()
	}
	err = s.lim.acquire(ctx, id, s.opts.PolicyTimeout)
	var span policySpan // when traced
	if s.tracer != nil {
		ctx, span = s.startPolicy(ctx, e, queued)
	}
	if err != nil {
		if errors.Is(err, errCoolingDown) { // the policy's failure answer, at once
			d := s.errored(log, e, kind, in, err)
			span.end(e, kind, &d, "")
			return s.write(w, kind, http.StatusOK, d.resp)
		}
		span.end(e, kind, nil, "overloaded")
		s.m.overloaded.Inc()
		w.Header().Set("Retry-After", "1")
		return httpError(w, http.StatusServiceUnavailable, "policy server overloaded: %v", err)
	}
	start := time.Now()
	d := func() decision {
		s.m.inFlight.Inc()
		defer s.m.inFlight.Dec()
		defer s.lim.release(id) // also if an evaluation panics
		var d decision
		if e.cfg.IsGroup() {
			d = s.evalGroup(ctx, log, e, kind, in)
		} else {
			d = s.evalPolicy(ctx, log, e, kind, in)
		}
		// before the release, so that its waiting requests do not get the worker;
		// a request the client gave up on tells nothing about the policy
		if r.Context().Err() == nil {
			if cool := s.lim.judge(id, d.costly, time.Since(start)); cool > 0 {
				log.Warn("policy ran out of time or memory: cooling down (answered without running)", "for", cool)
			}
		}
		return d
	}()
	elapsed := time.Since(start)
	span.end(e, kind, &d, "")

	mode := string(e.cfg.Mode)
	if kind == kindAudit {
		mode = "audit"
	}
	labels := []string{id, mode, in.operation, boolLabel(d.accepted), boolLabel(d.mutated)}
	s.m.evaluations.WithLabelValues(labels...).Inc()
	s.m.evalDuration.WithLabelValues(labels...).Observe(elapsed.Seconds())
	if log.Enabled(r.Context(), slog.LevelDebug) {
		log.Debug("evaluated", "allowed", d.resp.Allowed, "mutated", d.mutated, "duration", elapsed)
	}
	code := s.write(w, kind, http.StatusOK, d.resp)
	if set.shadows != nil {
		s.shadowAfter(r.Context(), set, id, kind, in, d, len(body)) // after the answer, never instead of it
	}
	return code
}

// readBody reads a request body into one buffer of the declared size (up
// to max) instead of io.ReadAll's doubling from 512 bytes: a 6 KB
// AdmissionReview took five allocations and 15 KB.
func readBody(r io.Reader, declared, max int64) ([]byte, error) {
	var b bytes.Buffer
	if declared > 0 && declared <= max {
		b.Grow(int(declared) + bytes.MinRead) // the read that sees EOF needs MinRead free
	}
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

func decodeInput(kind endpointKind, body []byte) (*input, error) {
	if kind == kindRaw {
		if err := admission.CheckJSON(body); err != nil {
			return nil, err
		}
		var env struct {
			Request json.RawMessage `json:"request"`
		}
		if t := bytes.TrimSpace(body); t[0] != '{' {
			return nil, errors.New(`the body must be {"request": <any JSON>}`)
		}
		if err := json.Unmarshal(body, &env); err != nil {
			return nil, err
		}
		req := bytes.TrimSpace(env.Request)
		if len(req) == 0 {
			return nil, errors.New(`the body must be {"request": <any JSON>}: "request" is missing`)
		}
		in := &input{raw: req, operation: "raw"}
		if req[0] == '{' {
			var u struct {
				UID any `json:"uid"`
			}
			if json.Unmarshal(req, &u) == nil {
				if s, ok := u.UID.(string); ok {
					in.uid = s
				}
			}
		}
		return in, nil
	}
	req, err := admission.ParseReview(body)
	if err != nil {
		return nil, err
	}
	return &input{uid: req.UID, operation: req.Operation, namespace: req.Namespace, req: req}, nil
}

func (s *Server) write(w http.ResponseWriter, kind endpointKind, code int, resp *admission.Response) int {
	var v any
	if kind == kindRaw {
		v = struct {
			Response *admission.Response `json:"response"`
		}{resp}
	} else {
		v = admission.NewReview(resp)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return httpError(w, http.StatusInternalServerError, "encoding the response: %v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
	return code
}

// errorReason classifies an evaluation error for metrics.
func errorReason(err error) string {
	switch {
	case errors.Is(err, wasm.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, wasm.ErrTrap):
		return "trap"
	case errors.Is(err, wasm.ErrMemoryLimit):
		return "memory"
	case errors.Is(err, policy.ErrInvalidResponse):
		return "invalid_response"
	case errors.Is(err, policy.ErrWrongPolicyType):
		return "wrong_type"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, errCoolingDown):
		return "cooling_down"
	}
	return "other"
}

// run evaluates one unit.
func run(ctx context.Context, u *unit, kind endpointKind, in *input) (*policy.Result, error) {
	if kind == kindRaw {
		return u.eval.ValidateRaw(ctx, in.raw)
	}
	return u.eval.Evaluate(ctx, in.req)
}

// evalPolicy evaluates a single policy and applies the admission semantics.
func (s *Server) evalPolicy(ctx context.Context, log *slog.Logger, e *entry, kind endpointKind, in *input) decision {
	resp, err := policyResponse(ctx, e, kind, in)
	if err != nil {
		return s.errored(log, e, kind, in, err)
	}
	d := decision{resp: resp, accepted: resp.Allowed, mutated: len(resp.Patch) > 0}
	if kind == kindAudit {
		return d
	}
	return s.monitor(log, &e.cfg, kind, in, d)
}

// policyResponse evaluates a single policy: its answer with the admission
// semantics but monitor mode (the raw verdict on the audit endpoint: no
// mutation checks, no message override), with no side effect (no log, no
// metric), so that a shadow's evaluation runs it too.
func policyResponse(ctx context.Context, e *entry, kind endpointKind, in *input) (*admission.Response, error) {
	res, err := run(ctx, e.unit, kind, in)
	if err != nil {
		return nil, err
	}
	v := res.Verdict()
	if len(v.Patch) > 0 && string(v.Patch) == "[]" {
		v.Patch = nil
	}
	if kind == kindAudit {
		return admission.FromVerdict(in.uid, v), nil
	}
	v = applySemantics(&e.cfg, in.operation, v)
	return fromVerdictWithCauses(in.uid, v, e.cfg.Message), nil
}

// applySemantics: a mutation by a policy not allowed to mutate, or of a
// DELETE request, becomes a rejection.
func applySemantics(cfg *config.Policy, operation string, v admission.Verdict) admission.Verdict {
	if len(v.Patch) == 0 || !v.Accepted {
		v.Patch = nil
		return v
	}
	switch {
	case !cfg.AllowedToMutate:
		return admission.Verdict{Accepted: false, Warnings: v.Warnings, AuditAnnotations: v.AuditAnnotations,
			Message: fmt.Sprintf("Request rejected by policy %s. The policy attempted to mutate the request, but it is currently configured to not allow mutations.", cfg.ID)}
	case operation == "DELETE":
		return admission.Verdict{Accepted: false, Warnings: v.Warnings, AuditAnnotations: v.AuditAnnotations,
			Message: fmt.Sprintf("Request rejected by policy %s. The policy attempted to mutate a DELETE request, which has no object to mutate.", cfg.ID)}
	}
	return v
}

// fromVerdictWithCauses builds the response; a rejection with a configured
// message carries that message and the policy's own in the causes.
func fromVerdictWithCauses(uid string, v admission.Verdict, message string) *admission.Response {
	orig := v.Message
	if !v.Accepted && message != "" {
		v.Message = message
	}
	resp := admission.FromVerdict(uid, v)
	if !v.Accepted && message != "" && orig != "" {
		resp.Status.Details = &admission.StatusDetails{Causes: []admission.StatusCause{{Message: orig}}}
	}
	return resp
}

// monitor turns d into an acceptance for monitor-mode policies, logging what
// would have happened.
func (s *Server) monitor(log *slog.Logger, cfg *config.Policy, kind endpointKind, in *input, d decision) decision {
	d.enforced = d.resp
	if cfg.Mode != config.ModeMonitor || kind == kindAudit {
		return d
	}
	if !d.resp.Allowed || d.mutated {
		msg := ""
		if d.resp.Status != nil {
			msg = d.resp.Status.Message
		}
		log.Info("monitor mode: the request would have been "+map[bool]string{true: "mutated", false: "rejected"}[d.resp.Allowed],
			"allowed", d.resp.Allowed, "mutated", d.mutated, "message", msg, "operation", in.operation)
	}
	return decision{resp: &admission.Response{UID: in.uid, Allowed: true}, accepted: true, enforced: d.enforced, reason: d.reason}
}

func (s *Server) errored(log *slog.Logger, e *entry, kind endpointKind, in *input, err error) decision {
	reason := errorReason(err)
	s.m.evalErrors.WithLabelValues(e.cfg.ID, reason).Inc()
	lvl := slog.LevelWarn
	if reason == "cooling_down" {
		lvl = slog.LevelDebug // one line per refused request would flood the log under attack
	}
	log.Log(context.Background(), lvl, "evaluation failed", "reason", reason, "error", err)
	code := int32(http.StatusInternalServerError)
	if reason == "wrong_type" {
		code = http.StatusBadRequest
	}
	d := decision{resp: admission.Errored(in.uid, code, errors.New(userMessage("policy "+e.cfg.ID+": evaluation failed: ", e.cfg.ID, err)))}
	d = s.monitor(log, &e.cfg, kind, in, d)
	d.costly = reason == "timeout" || reason == "memory"
	d.reason = reason
	return d
}

// evalGroup evaluates a group's expression lazily; rejecting members' verdicts
// go to status.details.causes. Groups never mutate.
func (s *Server) evalGroup(ctx context.Context, log *slog.Logger, e *entry, kind endpointKind, in *input) decision {
	resp, err := s.groupResponse(ctx, log, e, kind, in)
	if err != nil {
		return s.errored(log, e, kind, in, err)
	}
	return s.monitor(log, &e.cfg, kind, in, decision{resp: resp, accepted: resp.Allowed})
}

// groupResponse evaluates a group: its answer but monitor mode, with no side
// effect but a debug line (see policyResponse).
func (s *Server) groupResponse(ctx context.Context, log *slog.Logger, e *entry, kind endpointKind, in *input) (*admission.Response, error) {
	var causes []admission.StatusCause
	var warnings []string
	var annotations map[string]string
	accepted, err := group.Eval(e.cfg.Group.Expr, func(name string) (bool, error) {
		u := e.members[name]
		res, err := s.runMember(ctx, name, u, kind, in)
		if err != nil {
			return false, fmt.Errorf("member %s: %w", name, err)
		}
		if res.Patch != nil {
			log.Debug("group member returned a mutation; groups do not mutate, it is ignored", "member", name)
		}
		warnings = append(warnings, res.Response.Warnings...)
		for k, v := range res.Response.AuditAnnotations {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[k] = v
		}
		if !res.Response.Accepted {
			msg := "rejected"
			if res.Response.Message != nil && *res.Response.Message != "" {
				msg = *res.Response.Message
			}
			causes = append(causes, admission.StatusCause{Field: "spec.policies." + name, Message: msg})
		}
		return res.Response.Accepted, nil
	})
	if err != nil {
		return nil, err
	}
	resp := &admission.Response{UID: in.uid, Allowed: accepted, Warnings: warnings, AuditAnnotations: annotations}
	if !accepted {
		msg := e.cfg.Message
		if msg == "" {
			msg = fmt.Sprintf("the request was rejected by policy group %s", e.cfg.ID)
		}
		resp.Status = &admission.Status{Message: msg}
		if len(causes) > 0 {
			resp.Status.Details = &admission.StatusDetails{Causes: causes}
		}
	}
	return resp, nil
}

func (s *Server) handlePolicies(w http.ResponseWriter, r *http.Request) {
	var out status.Policies
	if s.cur.Load() == nil {
		out = s.loading.Load().policies() // the first set is loading: nothing serves yet
	} else {
		set := s.acquire()
		defer set.release()
		s.statusMu.RLock()
		last := s.lastReload
		s.statusMu.RUnlock()
		out = status.Policies{Generation: set.gen, LoadedAt: set.loadedAt, ConfigDigest: set.digest, Embedded: set.cfg.Embedded,
			LastReload: last, Policies: make([]status.Policy, 0, len(set.entries))}
		ids := make([]string, 0, len(set.entries))
		for id := range set.entries {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			st := set.entries[id].status()
			if sh := set.shadows[id]; sh != nil {
				st.Shadow = sh.status()
			}
			out.Policies = append(out.Policies, st)
		}
	}
	redactStatus(&out)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// policyStatus is the /policies form of p's configuration in state, without
// what loading it gives (module, digest, members).
func policyStatus(p *config.Policy, state string) status.Policy {
	st := status.Policy{ID: p.ID, Kind: status.KindPolicy, Mode: string(p.Mode), AllowedToMutate: p.AllowedToMutate, State: state}
	if p.IsGroup() {
		st.Kind, st.Expression = status.KindGroup, p.Group.Expression
	}
	return st
}

// status is the entry's /policies form.
func (e *entry) status() status.Policy {
	if e.placeholder() {
		return loadingStatus(&e.cfg)
	}
	p := policyStatus(&e.cfg, e.state())
	p.Loading = e.loading
	switch {
	case e.loading && e.err == nil && e.stale == nil:
		// the previous version serves while the new one loads
		p.Stale, p.Error = true, "its version in the serving configuration is still loading"
	case e.err != nil:
		p.Error = briefError(e.err.Error())
	case e.stale != nil:
		p.Stale, p.Error = true, briefError(e.stale.Error())
	}
	if e.unit != nil {
		p.Module, p.Digest, p.ManifestDigest = e.unit.module, e.unit.digest, e.unit.manifest
		if !e.unit.loadedAt.IsZero() {
			t := e.unit.loadedAt
			p.LoadedAt = &t
		}
		return p
	}
	for _, m := range e.cfg.Group.Members {
		u := e.members[m.Name]
		mi := status.Member{Name: m.Name, Module: u.module, Digest: u.digest, ManifestDigest: u.manifest, State: status.StateReady}
		if u.err != nil {
			mi.State, mi.Error = status.StateFailed, briefError(u.err.Error())
		}
		p.Members = append(p.Members, mi)
	}
	return p
}
