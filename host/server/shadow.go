package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// Shadow evaluation (policies.yml `shadow:`, config.Shadow): a policy's
// candidate version is loaded like a policy of its own, under the id
// "ID#shadow" ('#' is in no policy id or member name), and kept beside the
// serving entry in the policy set (policySet.shadows). After the serving
// version answered a request (the answer is written before the candidate is
// queued), a shadow worker evaluates the candidate on the same request and
// compares the two answers. The candidate never answers, never takes a
// serving worker, queue place or body budget, and its failures (a load that
// fails, a trap, a deadline) are counted and reported, never served.
//
// Bounds: the candidates of all policies share --shadow-workers workers and
// a queue of --shadow-queue-size jobs (one policy at most half of it) and of
// at most shadowQueueBytes request bytes; a job that does not fit is dropped
// and counted (queue_full), as is one whose turn comes while serving
// requests wait for a worker (busy: candidates use spare capacity only) or
// while its candidate cools down after running out of time or memory
// (cooling_down, as the limiter's cool-down of a policy).

// shadowSuffix ends the id of a candidate's units.
const shadowSuffix = "#shadow"

// Drop reasons (tollgate_policy_shadow_dropped_total's reason label).
const (
	dropQueueFull   = "queue_full"
	dropBusy        = "busy"
	dropCoolingDown = "cooling_down"
	dropShutdown    = "shutdown"
)

const (
	// maxRecentDivergences are kept per candidate for GET /policies.
	maxRecentDivergences = 5
	// divergenceLogBurst lines are logged per candidate at once, then one
	// per divergenceLogEvery; the others are counted in the next line.
	divergenceLogBurst = 10
	divergenceLogEvery = 10 * time.Second
)

// shadow is a policy's candidate version in a policy set.
type shadow struct {
	// e is the candidate as an entry (cfg is config.Policy.ShadowPolicy()),
	// loaded as a policy is; e.err is its load error.
	e *entry
	// st are its counts since it loaded, carried over to the next set while
	// its evaluators are the same.
	st *shadowStats
}

func newShadow(e *entry) *shadow { return &shadow{e: e, st: &shadowStats{}} }

// ready reports whether the candidate is loaded.
func (sh *shadow) ready() bool { return sh.e.serves() && !sh.e.loading }

// shadowStats are a candidate's counts and its cool-down.
type shadowStats struct {
	evaluations atomic.Int64

	mu          sync.Mutex
	divergences map[string]int64
	dropped     map[string]int64
	recent      []status.Divergence // newest first
	// the rate of divergence log lines: tokens left, last refill, lines not logged
	logTokens  float64
	logAt      time.Time
	suppressed int64
	// cool-down: costly evaluations in a row, and until when none runs
	strikes   int
	coolUntil time.Time
}

func (st *shadowStats) drop(reason string) {
	st.mu.Lock()
	if st.dropped == nil {
		st.dropped = map[string]int64{}
	}
	st.dropped[reason]++
	st.mu.Unlock()
}

// cooling reports whether the candidate is cooling down at now.
func (st *shadowStats) cooling(now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.strikes > 0 && now.Before(st.coolUntil)
}

// judge records whether an evaluation that took spent ran out of time or
// memory, and starts (or ends) the candidate's cool-down.
func (st *shadowStats) judge(costly bool, spent time.Duration, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !costly {
		st.strikes = 0
		return
	}
	st.strikes++
	st.coolUntil = now.Add(cooldownFor(st.strikes, spent))
}

// record counts a compared evaluation; kind is its divergence ("" none). It
// reports whether the divergence may be logged, and how many were not since
// the last one that was.
func (st *shadowStats) record(kind string, d status.Divergence, now time.Time) (logIt bool, suppressed int64) {
	st.evaluations.Add(1)
	if kind == "" {
		return false, 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.divergences == nil {
		st.divergences = map[string]int64{}
	}
	st.divergences[kind]++
	if len(st.recent) < maxRecentDivergences {
		st.recent = append(st.recent, status.Divergence{})
	}
	copy(st.recent[1:], st.recent)
	st.recent[0] = d
	if st.logAt.IsZero() {
		st.logTokens, st.logAt = divergenceLogBurst, now
	}
	st.logTokens = min(divergenceLogBurst, st.logTokens+float64(now.Sub(st.logAt))/float64(divergenceLogEvery))
	st.logAt = now
	if st.logTokens < 1 {
		st.suppressed++
		return false, 0
	}
	st.logTokens--
	suppressed, st.suppressed = st.suppressed, 0
	return true, suppressed
}

// status is the candidate's /policies form.
func (sh *shadow) status() *status.Shadow {
	e := sh.e
	out := &status.Shadow{State: e.state(), Evaluations: sh.st.evaluations.Load(), Divergences: map[string]int64{}}
	if e.loading {
		out.State = status.StateLoading
	}
	if e.err != nil {
		out.Error = briefError(e.err.Error())
	}
	if e.cfg.IsGroup() {
		out.Expression = e.cfg.Group.Expression
		for _, m := range e.cfg.Group.Members {
			mi := status.Member{Name: m.Name, Module: m.Module, State: status.StateLoading}
			if u := e.members[m.Name]; u != nil && !e.loading {
				mi.Digest, mi.State = u.digest, status.StateReady
				if u.err != nil {
					mi.State, mi.Error = status.StateFailed, briefError(u.err.Error())
				}
			}
			out.Members = append(out.Members, mi)
		}
	} else {
		out.Module = e.cfg.Module
		if e.unit != nil && !e.loading {
			out.Digest = e.unit.digest
			if t := e.unit.loadedAt; !t.IsZero() {
				out.LoadedAt = &t
			}
		}
	}
	st := sh.st
	st.mu.Lock()
	for k, v := range st.divergences {
		out.Divergences[k] = v
	}
	if len(st.dropped) > 0 {
		out.Dropped = make(map[string]int64, len(st.dropped))
		for k, v := range st.dropped {
			out.Dropped[k] = v
		}
	}
	out.Recent = append([]status.Divergence(nil), st.recent...)
	st.mu.Unlock()
	return out
}

// shadowJob is one candidate evaluation: the request, the serving answer,
// and a reference on the set that holds both versions.
type shadowJob struct {
	set     *policySet
	id      string
	sh      *shadow
	kind    endpointKind
	in      *input
	serving answer
	bytes   int64
	// link is the request's server span when it was traced and sampled
	// (invalid otherwise), and queued when the job was queued: the shadow
	// evaluation's span (startShadow) starts then, in a trace of its own
	// linked to the request's.
	link   trace.SpanContext
	queued time.Time
}

// answer is one version's answer to a request as it would be enforced
// (before monitor mode), or its evaluation's failure.
type answer struct {
	resp   *admission.Response
	failed string // errorReason of the failure, "" when it answered
}

// shadowPool runs the candidates' evaluations on workers of their own.
type shadowPool struct {
	s                  *Server
	workers            int
	queueCap, perQueue int
	maxBytes           int64

	mu       sync.Mutex
	started  bool
	stopped  bool
	queue    chan *shadowJob
	quit     chan struct{}
	bytes    int64
	perID    map[string]int
	inFlight sync.WaitGroup
}

// shadowQueueBytes bounds the request bytes of the jobs waiting for a shadow
// worker: at most two requests of --max-request-bytes.
func shadowQueueBytes(maxRequestBytes int64) int64 { return 2 * maxRequestBytes }

func (s *Server) newShadowPool() *shadowPool {
	o := &s.opts
	p := &shadowPool{s: s, workers: o.EffectiveShadowWorkers(), queueCap: o.EffectiveShadowQueueSize(),
		maxBytes: shadowQueueBytes(o.MaxRequestBytes), perID: map[string]int{}, quit: make(chan struct{})}
	p.perQueue = max(1, p.queueCap/2)
	p.queue = make(chan *shadowJob, p.queueCap)
	s.m.limits.WithLabelValues("shadow_workers").Set(float64(p.workers))
	s.m.limits.WithLabelValues("shadow_queue").Set(float64(p.queueCap))
	return p
}

// submit queues j (taking a reference on j.set until it ran), or drops it.
// Workers start with the first job.
func (p *shadowPool) submit(j *shadowJob) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		p.dropped(j, dropShutdown)
		return
	}
	if p.perID[j.id] >= p.perQueue || p.bytes+j.bytes > p.maxBytes || len(p.queue) >= p.queueCap {
		p.mu.Unlock()
		p.dropped(j, dropQueueFull)
		return
	}
	if !p.started {
		p.started = true
		p.inFlight.Add(p.workers)
		for range p.workers {
			go p.work()
		}
	}
	p.perID[j.id]++
	p.bytes += j.bytes
	j.set.refs.Add(1) // released by the worker; the set is acquired, so it lives
	p.queue <- j      // never blocks: len(queue) < cap under mu, and only submit sends
	p.mu.Unlock()
}

func (p *shadowPool) dropped(j *shadowJob, reason string) {
	j.sh.st.drop(reason)
	p.s.m.shadowDropped.WithLabelValues(j.id, reason).Inc()
}

// take is a worker's next job, nil when the pool stops.
func (p *shadowPool) take() *shadowJob {
	select {
	case j := <-p.queue:
		p.mu.Lock()
		p.perID[j.id]--
		if p.perID[j.id] == 0 {
			delete(p.perID, j.id)
		}
		p.bytes -= j.bytes
		p.mu.Unlock()
		return j
	case <-p.quit:
		return nil
	}
}

func (p *shadowPool) work() {
	defer p.inFlight.Done()
	for {
		j := p.take()
		if j == nil {
			return
		}
		func() {
			defer j.set.release()
			reason := ""
			switch {
			case p.stopping():
				reason = dropShutdown
			case p.s.lim.busy():
				reason = dropBusy
			case j.sh.st.cooling(time.Now()):
				reason = dropCoolingDown
			default:
				p.s.runShadow(j)
				return
			}
			p.dropped(j, reason)
			p.s.traceDropped(j, reason)
		}()
	}
}

func (p *shadowPool) stopping() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}

// stop ends the workers (a running evaluation ends with the server's base
// context) and drops the jobs still queued.
func (p *shadowPool) stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	close(p.quit)
	p.mu.Unlock()
	p.inFlight.Wait()
	for {
		select {
		case j := <-p.queue:
			p.dropped(j, dropShutdown)
			j.set.release()
		default:
			return
		}
	}
}

// shadowAfter queues the evaluation of id's candidate on in, whose serving
// answer is d, when the policy has a loaded candidate and the serving
// version evaluated the request. ctx is the request's: when its server span
// is sampled, the job carries it, for the link of the shadow's span.
func (s *Server) shadowAfter(ctx context.Context, set *policySet, id string, kind endpointKind, in *input, d decision, size int) {
	sh := set.shadows[id]
	if sh == nil || kind == kindAudit || !sh.ready() || d.enforced == nil || d.reason == "cooling_down" || d.reason == "canceled" {
		return
	}
	j := &shadowJob{set: set, id: id, sh: sh, kind: kind, in: in,
		serving: answer{resp: d.enforced, failed: d.reason}, bytes: int64(size)}
	if s.tracer != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			j.link, j.queued = sc, time.Now()
		}
	}
	s.shadows.submit(j)
}

// runShadow evaluates j's candidate and compares its answer with the serving one.
func (s *Server) runShadow(j *shadowJob) {
	e := j.sh.e
	timeout := s.opts.PolicyTimeout
	if e.cfg.Timeout > 0 {
		timeout = e.cfg.Timeout
	}
	// the evaluator enforces the candidate's deadline; this one is the backstop
	ctx, cancel := context.WithTimeout(s.base, timeout+time.Second)
	defer cancel()
	ctx, span := s.startShadow(ctx, j)
	start := time.Now()
	var resp *admission.Response
	var err error
	if e.cfg.IsGroup() {
		resp, err = s.groupResponse(ctx, requestLog(s.log, j.id+shadowSuffix, j.in.uid, j.kind.String()), e, j.kind, j.in)
	} else {
		resp, err = policyResponse(ctx, e, j.kind, j.in)
	}
	spent := time.Since(start)
	cand := answer{resp: resp}
	if err != nil {
		cand.failed = errorReason(err)
		if s.base.Err() != nil {
			j.sh.st.drop(dropShutdown) // cut by the shutdown: nothing to compare
			s.m.shadowDropped.WithLabelValues(j.id, dropShutdown).Inc()
			span.end(j, start, cand, "", dropShutdown)
			return
		}
	}
	j.sh.st.judge(cand.failed == "timeout" || cand.failed == "memory", spent, time.Now())
	kind := divergence(j.serving, cand)
	span.end(j, start, cand, kind, "")
	s.m.shadowEvaluations.WithLabelValues(j.id).Inc()
	if kind != "" {
		s.m.shadowDivergences.WithLabelValues(j.id, kind).Inc()
	}
	d := status.Divergence{Time: time.Now(), UID: j.in.uid, Operation: j.in.operation, Divergence: kind,
		Serving: brief(j.serving), Candidate: brief(cand)}
	if r := j.in.req; r != nil {
		d.Kind, d.Namespace, d.Name = r.Kind.Kind, r.Namespace, r.Name
	}
	logIt, suppressed := j.sh.st.record(kind, d, d.Time)
	if !logIt {
		return
	}
	args := []any{"policy", j.id, "uid", d.UID, "kind", d.Kind, "namespace", d.Namespace, "name", d.Name,
		"operation", d.Operation, "divergence", kind, answerGroup("serving", d.Serving), answerGroup("shadow", d.Candidate)}
	if err != nil {
		args = append(args, "shadow_error", truncate(briefError(err.Error()), 300))
	}
	if suppressed > 0 {
		args = append(args, "not_logged_before", suppressed)
	}
	s.log.Info("shadow diverged from the serving version", args...)
}

func answerGroup(name string, a status.Answer) slog.Attr {
	attrs := []any{"allowed", a.Allowed}
	if a.Error != "" {
		attrs = append(attrs, "error", a.Error)
	}
	if a.Code != 0 {
		attrs = append(attrs, "code", a.Code)
	}
	if a.Message != "" {
		attrs = append(attrs, "message", a.Message)
	}
	if a.PatchOps > 0 {
		attrs = append(attrs, "patch_ops", a.PatchOps)
	}
	return slog.Group(name, attrs...)
}

// divergence classifies how cand differs from serving: DivergenceError when
// exactly one of them failed, else DivergenceVerdict, DivergencePatch,
// DivergenceMessage (message, code or causes), or "" when they agree (two
// failures agree).
func divergence(serving, cand answer) string {
	switch {
	case (serving.failed != "") != (cand.failed != ""):
		return status.DivergenceError
	case serving.failed != "":
		return ""
	case serving.resp.Allowed != cand.resp.Allowed:
		return status.DivergenceVerdict
	case !bytes.Equal(serving.resp.Patch, cand.resp.Patch):
		return status.DivergencePatch
	case statusText(serving.resp) != statusText(cand.resp):
		return status.DivergenceMessage
	}
	return ""
}

// statusText is what a response says besides its verdict and patch: its
// message, code and causes.
func statusText(r *admission.Response) string {
	if r.Status == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(r.Status.Message)
	b.WriteByte(0)
	b.WriteString(strconv.Itoa(int(r.Status.Code)))
	if r.Status.Details != nil {
		for _, c := range r.Status.Details.Causes {
			b.WriteByte(0)
			b.WriteString(c.Field)
			b.WriteByte(0)
			b.WriteString(c.Message)
		}
	}
	return b.String()
}

// brief is an answer as /policies and the log show it: never the object.
func brief(a answer) status.Answer {
	out := status.Answer{Error: a.failed}
	if a.resp == nil {
		return out
	}
	out.Allowed = a.resp.Allowed
	if a.resp.Status != nil {
		out.Code, out.Message = a.resp.Status.Code, truncate(a.resp.Status.Message, 300)
	}
	if len(a.resp.Patch) > 0 {
		var ops []json.RawMessage
		if json.Unmarshal(a.resp.Patch, &ops) == nil {
			out.PatchOps = len(ops)
		}
	}
	return out
}
