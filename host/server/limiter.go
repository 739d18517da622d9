package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// errOverloaded: no worker became free in time, or the queue is full.
var errOverloaded = errors.New("server overloaded")

// Why a request was refused a worker (the reason label of
// tollgate_policy_rejections_total).
const (
	rejectQueueFull       = "queue_full"        // the server's queue is full
	rejectPolicyQueueFull = "policy_queue_full" // the policy's share of the queue is full
	rejectWaitExpired     = "wait_expired"      // no worker within the policy timeout
)

// errCoolingDown: the policy ran out of time or memory recently and is
// answered without running (its failure answer) until its cool-down ends.
var errCoolingDown = errors.New("cooling down")

// coolingDown is errCoolingDown with when the policy runs again.
type coolingDown struct {
	left  time.Duration // until the cool-down ends; 0: it ended and one probe runs
	spent time.Duration // the evaluation that started it
}

func (c *coolingDown) Error() string {
	if c.left <= 0 {
		return "cooling down: the policy ran out of time or memory, and one request is trying it again now"
	}
	return fmt.Sprintf("cooling down: the policy ran out of time or memory after %s, so it is not run for another %s",
		c.spent.Round(time.Millisecond), c.left.Round(100*time.Millisecond))
}

func (c *coolingDown) Unwrap() error { return errCoolingDown }

// The cool-down after an evaluation that ran out of time or memory: cooldownFactor
// times what that evaluation cost (so a policy that loops to its deadline on every
// request holds at most a tenth of a worker), at least minCooldown, doubled for each
// further such evaluation without a success in between, up to maxCooldown (or
// cooldownFactor times the cost when that is longer).
const (
	cooldownFactor = 9
	minCooldown    = time.Second
	maxCooldown    = 2 * time.Minute
)

// cooldownFor is the cool-down after the strikes-th costly evaluation in a row,
// which took spent.
func cooldownFor(strikes int, spent time.Duration) time.Duration {
	base := max(minCooldown, cooldownFactor*spent)
	limit := max(maxCooldown, base)
	d := base
	for i := 1; i < strikes && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// rejection is errOverloaded with its reason.
type rejection struct{ reason string }

func (r *rejection) Error() string {
	switch r.reason {
	case rejectQueueFull:
		return "the server's queue is full"
	case rejectPolicyQueueFull:
		return "the policy's share of the queue is full"
	}
	return "no worker became free in time"
}

func (r *rejection) Unwrap() error { return errOverloaded }

// limiter bounds concurrent evaluations (workers) and the requests waiting
// for one (queue), fairly between policies:
//
//   - one policy (or group) runs at most perPolicy evaluations at once, so
//     that workers - perPolicy workers stay for the others even while it
//     loops to its deadline on every request;
//   - one policy holds at most perPolicyQueue of the queue's places;
//   - a freed worker goes to the policies with waiting requests in turn
//     (round robin), each policy's requests in their order of arrival: a
//     request to a quiet policy waits for at most one turn, not behind the
//     whole queue of a busy one;
//   - a policy whose evaluation ran out of time or memory cools down
//     (judge): its requests are refused with errCoolingDown, without a worker,
//     for cooldownFor of that evaluation (its waiting requests too); then one
//     request at a time probes it: a probe that ends in time ends the
//     cool-down, one that does not starts a longer one. So a policy that
//     loops on every request burns at most a tenth of a worker, not a whole
//     one (and on a 2-CPU machine, a whole core) while the others serve.
//
// A full queue (the server's or the policy's share) is answered at once
// instead of growing; a wait longer than the caller's bound is answered too.
type limiter struct {
	workers, perPolicy    int
	queue, perPolicyQueue int
	mu                    sync.Mutex
	free                  int // workers not running an evaluation
	waiting               int // requests in the queue
	pols                  map[string]*policyLane
	turns                 []*policyLane // policies with waiting requests and a worker to spare, in turn
	onQueue               func(id string, delta int)
	onRun                 func(id string, delta int)
	onReject              func(id, reason string)
	onCooldown            func(id string, d time.Duration)
	now                   func() time.Time
	// cooldownAfter: costly evaluations of a policy in a row that start its
	// cool-down (0: never); newLimiter sets 1, the server its option.
	cooldownAfter int
}

// policyLane is one policy's running evaluations and waiting requests.
type policyLane struct {
	id      string
	running int
	waiters []*waiter
	inTurn  bool
	removed bool // a reload removed the policy: the lane goes once idle

	// cool-down (judge): misses costly evaluations in a row before a
	// cool-down; then strikes costly evaluations in a row; none runs before
	// coolUntil, then one at a time until a success.
	misses    int
	strikes   int
	coolUntil time.Time
	spent     time.Duration // the last costly evaluation's time
}

type waiter struct {
	ch      chan struct{} // closed when granted or refused
	granted bool
	refused error // the policy started cooling down while it waited
}

// limiterHooks report the limiter's per-policy state (metrics).
type limiterHooks struct {
	queued   func(id string, delta int)
	running  func(id string, delta int)
	rejected func(id, reason string)
	cooldown func(id string, d time.Duration) // a cool-down of d started; 0: it ended
}

// newLimiter: workers evaluations at once, queue requests waiting; one policy
// at most perPolicy workers and perPolicyQueue places (0: the defaults,
// defaultPerPolicy and defaultPerPolicyQueue).
func newLimiter(workers, queue, perPolicy, perPolicyQueue int, h limiterHooks) *limiter {
	if perPolicy <= 0 {
		perPolicy = defaultPerPolicy(workers)
	}
	if perPolicyQueue <= 0 {
		perPolicyQueue = defaultPerPolicyQueue(queue)
	}
	nop := func(string, int) {}
	if h.queued == nil {
		h.queued = nop
	}
	if h.running == nil {
		h.running = nop
	}
	if h.rejected == nil {
		h.rejected = func(string, string) {}
	}
	if h.cooldown == nil {
		h.cooldown = func(string, time.Duration) {}
	}
	return &limiter{workers: workers, perPolicy: min(perPolicy, workers), queue: queue, perPolicyQueue: min(perPolicyQueue, queue),
		free: workers, pols: map[string]*policyLane{}, onQueue: h.queued, onRun: h.running, onReject: h.rejected,
		onCooldown: h.cooldown, now: time.Now, cooldownAfter: 1}
}

// defaultPerPolicy leaves a quarter of the workers (rounded up, at least
// one) to the other policies: 1 of 2, 3 of 4, 6 of 8. With one worker
// there is nothing to leave.
func defaultPerPolicy(workers int) int {
	return max(1, workers-(workers+3)/4)
}

// defaultPerPolicyQueue is half the queue (at least 1).
func defaultPerPolicyQueue(queue int) int { return max(1, queue/2) }

func (l *limiter) lane(id string) *policyLane {
	p := l.pols[id]
	if p == nil {
		p = &policyLane{id: id}
		l.pols[id] = p
	}
	return p
}

// forget drops the lane of a policy a reload removed once it is idle. A
// served policy's lane outlives its requests (so the request path does not
// allocate one per request, and its cool-down is kept).
func (l *limiter) forget(p *policyLane) {
	if p.removed && p.running == 0 && len(p.waiters) == 0 && !p.inTurn {
		delete(l.pols, p.id)
	}
}

// prune marks the lanes of policies that serving no longer has and drops
// those that are idle (the others go when their last request ends); a lane
// of a policy served again is kept.
func (l *limiter) prune(serving func(id string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, p := range l.pols {
		p.removed = !serving(id)
		l.forget(p)
	}
}

// reset ends policy id's cool-down (a reload changed the policy).
func (l *limiter) reset(id string) {
	l.mu.Lock()
	p := l.pols[id]
	cooling := p != nil && p.strikes > 0
	if p != nil {
		p.misses, p.strikes, p.coolUntil, p.spent = 0, 0, time.Time{}, 0
	}
	l.mu.Unlock()
	if cooling {
		l.onCooldown(id, 0)
	}
}

// cooling reports whether p refuses a request now: while its cool-down
// runs, and after it while a probe runs or waits. Called with mu held.
func (l *limiter) cooling(p *policyLane) *coolingDown {
	if p.strikes == 0 {
		return nil
	}
	if left := p.coolUntil.Sub(l.now()); left > 0 {
		return &coolingDown{left: left, spent: p.spent}
	}
	if p.running > 0 || len(p.waiters) > 0 {
		return &coolingDown{spent: p.spent} // one probe at a time
	}
	return nil
}

// acquire takes a worker for policy id, waiting at most wait (and while ctx
// lives) when none is free. The error wraps errOverloaded (a *rejection),
// or errCoolingDown (a *coolingDown: the caller answers with the policy's
// failure answer), or is ctx's.
func (l *limiter) acquire(ctx context.Context, id string, wait time.Duration) error {
	l.mu.Lock()
	p := l.lane(id)
	if c := l.cooling(p); c != nil {
		l.mu.Unlock()
		return c
	}
	if l.free > 0 && p.running < l.perPolicy && len(p.waiters) == 0 {
		l.free--
		p.running++
		l.mu.Unlock()
		l.onRun(id, 1)
		return nil
	}
	reason := ""
	switch {
	case l.waiting >= l.queue:
		reason = rejectQueueFull
	case len(p.waiters) >= l.perPolicyQueue:
		reason = rejectPolicyQueueFull
	}
	if reason != "" {
		l.mu.Unlock()
		l.onReject(id, reason)
		return &rejection{reason}
	}
	w := &waiter{ch: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	l.waiting++
	if !p.inTurn && p.running < l.perPolicy {
		p.inTurn = true
		l.turns = append(l.turns, p)
	}
	l.dispatch() // a worker may be free for another policy's turn
	l.mu.Unlock()
	l.onQueue(id, 1)

	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ch:
	case <-t.C:
		err = &rejection{rejectWaitExpired}
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	switch {
	case w.refused != nil: // refused (closed ch) as the wait ended, or before
		err = w.refused
	case w.granted: // granted as the wait ended: take it
		err = nil
	case err != nil:
		for i, x := range p.waiters {
			if x == w {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				break
			}
		}
		l.waiting--
		l.forget(p)
	}
	l.mu.Unlock()
	l.onQueue(id, -1)
	if err != nil {
		if errors.Is(err, errOverloaded) {
			l.onReject(id, rejectWaitExpired)
		}
		return err
	}
	l.onRun(id, 1)
	return nil
}

// judge records how policy id's evaluation went, before its worker is
// released: one that ran out of time or memory (costly, after spent)
// starts a cool-down (returned) and refuses the policy's waiting requests;
// any other ends a cool-down.
func (l *limiter) judge(id string, costly bool, spent time.Duration) time.Duration {
	l.mu.Lock()
	p := l.pols[id]
	if p != nil && p.strikes == 0 {
		// not cooling down: a cool-down starts only after cooldownAfter
		// costly evaluations in a row (one slow input does not refuse the
		// policy's next requests)
		if !costly {
			p.misses = 0
		} else if p.misses++; l.cooldownAfter > 0 && p.misses >= l.cooldownAfter {
			p.misses = 0
			costly = true
		} else {
			costly = false
		}
	}
	if p == nil || (!costly && p.strikes == 0) {
		l.mu.Unlock()
		return 0
	}
	if !costly {
		p.strikes, p.coolUntil, p.spent = 0, time.Time{}, 0
		l.mu.Unlock()
		l.onCooldown(id, 0)
		return 0
	}
	now := l.now()
	if now.Before(p.coolUntil) {
		// another of its evaluations, which started before the cool-down, ran out
		// too: the cool-down it started stands
		l.mu.Unlock()
		return 0
	}
	p.strikes++
	d := cooldownFor(p.strikes, spent)
	p.coolUntil, p.spent = now.Add(d), spent
	refused := p.waiters
	p.waiters = nil
	l.waiting -= len(refused)
	for _, w := range refused {
		w.refused = &coolingDown{left: d, spent: spent}
		close(w.ch)
	}
	l.mu.Unlock()
	l.onCooldown(id, d)
	return d
}

// release gives back policy id's worker; the next policy in turn gets it.
func (l *limiter) release(id string) {
	l.mu.Lock()
	p := l.pols[id]
	if p == nil || p.running == 0 {
		l.mu.Unlock()
		panic(fmt.Sprintf("limiter: release of policy %q without a worker", id))
	}
	p.running--
	l.free++
	if len(p.waiters) > 0 && !p.inTurn {
		p.inTurn = true
		l.turns = append(l.turns, p)
	}
	l.dispatch()
	l.forget(p)
	l.mu.Unlock()
	l.onRun(id, -1)
}

// dispatch hands free workers to the waiting policies in turn, one request
// per turn. Called with mu held.
func (l *limiter) dispatch() {
	for l.free > 0 && len(l.turns) > 0 {
		p := l.turns[0]
		l.turns[0] = nil
		l.turns = l.turns[1:]
		p.inTurn = false
		if len(p.waiters) == 0 || p.running >= l.perPolicy {
			l.forget(p)
			continue // back in turn when it has waiters and a worker to spare again
		}
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		l.waiting--
		l.free--
		p.running++
		w.granted = true
		close(w.ch)
		if len(p.waiters) > 0 && p.running < l.perPolicy {
			p.inTurn = true
			l.turns = append(l.turns, p)
		}
	}
}

// busy reports whether requests wait for a worker: shadow evaluations then
// give way (shadow.go).
func (l *limiter) busy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting > 0
}

// queued is the number of requests waiting for a worker (tests).
func (l *limiter) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// newLimiter is the server's limiter, the body budget and their metrics.
func (s *Server) newLimiter() *limiter {
	o := &s.opts
	l := newLimiter(o.Workers, o.EffectiveQueueSize(), o.PolicyWorkers, o.PolicyQueueSize, limiterHooks{
		queued: func(id string, d int) {
			s.m.queued.Add(float64(d))
			s.m.policyQueued.WithLabelValues(id).Add(float64(d))
		},
		running:  func(id string, d int) { s.m.policyRunning.WithLabelValues(id).Add(float64(d)) },
		rejected: func(id, reason string) { s.m.policyRejected.WithLabelValues(id, reason).Inc() },
		cooldown: func(id string, d time.Duration) {
			if d > 0 {
				s.m.policyCooldowns.WithLabelValues(id).Inc()
			}
			s.m.policyCooldown.WithLabelValues(id).Set(d.Seconds())
		},
	})
	l.cooldownAfter = o.PolicyCooldownAfter
	s.bodies = newBodyBudget(o.MaxRequestBytesInFlight, o.MaxRequestBytes, s.m.bodyBytes.Set, s.m.h2Parked.Set)
	for name, v := range map[string]int64{"workers": int64(l.workers), "policy_workers": int64(l.perPolicy),
		"queue": int64(l.queue), "policy_queue": int64(l.perPolicyQueue),
		"request_bytes_in_flight": s.bodies.total, "connections": int64(o.MaxConnections), "policy_cooldown_after": int64(l.cooldownAfter)} {
		s.m.limits.WithLabelValues(name).Set(float64(v))
	}
	return l
}

// limitConnections caps the webhook's open connections at --max-connections
// (connLimiter): a new client takes the slot of the connection idle the
// longest; with none idle it waits until one closes or goes idle.
// It wraps the listener that gives the served connections (TLS included),
// since ConnState reports those.
func (s *Server) limitConnections(ln net.Listener) net.Listener {
	if s.opts.MaxConnections <= 0 {
		return ln
	}
	l := newConnLimiter(ln, s.opts.MaxConnections, s.m.idleConnsClosed.Inc)
	s.hook.ConnState = l.connState
	return l
}
