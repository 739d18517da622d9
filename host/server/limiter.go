package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/net/netutil"
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
//     whole queue of a busy one.
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
}

// policyLane is one policy's running evaluations and waiting requests.
type policyLane struct {
	id      string
	running int
	waiters []*waiter
	inTurn  bool
}

type waiter struct {
	ch      chan struct{} // closed when granted
	granted bool
}

// limiterHooks report the limiter's per-policy state (metrics).
type limiterHooks struct {
	queued   func(id string, delta int)
	running  func(id string, delta int)
	rejected func(id, reason string)
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
	return &limiter{workers: workers, perPolicy: min(perPolicy, workers), queue: queue, perPolicyQueue: min(perPolicyQueue, queue),
		free: workers, pols: map[string]*policyLane{}, onQueue: h.queued, onRun: h.running, onReject: h.rejected}
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

// forget drops an idle lane (policies come and go with reloads).
func (l *limiter) forget(p *policyLane) {
	if p.running == 0 && len(p.waiters) == 0 && !p.inTurn {
		delete(l.pols, p.id)
	}
}

// prune drops the idle lanes of policies that serving no longer has. A lane
// outlives its requests (release keeps it, so the request path does not
// allocate one per request); swap prunes after a reload.
func (l *limiter) prune(serving func(id string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, p := range l.pols {
		if !serving(id) {
			l.forget(p)
		}
	}
}

// acquire takes a worker for policy id, waiting at most wait (and while ctx
// lives) when none is free. The error wraps errOverloaded (a *rejection), or
// is ctx's.
func (l *limiter) acquire(ctx context.Context, id string, wait time.Duration) error {
	l.mu.Lock()
	p := l.lane(id)
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
		l.forget(p)
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
	if err != nil {
		l.mu.Lock()
		if w.granted { // granted as the wait ended: take it
			err = nil
		} else {
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
		if err != nil {
			l.onQueue(id, -1)
			if errors.Is(err, errOverloaded) {
				l.onReject(id, rejectWaitExpired)
			}
			return err
		}
	}
	l.onQueue(id, -1)
	l.onRun(id, 1)
	return nil
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
	})
	s.bodies = newBodyBudget(o.MaxRequestBytesInFlight, o.MaxRequestBytes, s.m.bodyBytes.Set)
	for name, v := range map[string]int64{"workers": int64(l.workers), "policy_workers": int64(l.perPolicy),
		"queue": int64(l.queue), "policy_queue": int64(l.perPolicyQueue),
		"request_bytes_in_flight": s.bodies.total, "connections": int64(o.MaxConnections)} {
		s.m.limits.WithLabelValues(name).Set(float64(v))
	}
	return l
}

// limitConnections caps the webhook's open connections at --max-connections:
// more wait in the listen backlog until one closes.
func (s *Server) limitConnections() {
	if s.opts.MaxConnections > 0 {
		s.hookLn = netutil.LimitListener(s.hookLn, s.opts.MaxConnections)
	}
}
