package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
)

// ErrLoadTimeout: a policy's load (compile, instantiate, start functions,
// validate_settings) did not end within Options' LoadTimeout
// (--policy-load-timeout); the policy is failed with it.
var ErrLoadTimeout = errors.New("load deadline exceeded")

// errShutdown fails the loads that were still waiting when the server shut down.
var errShutdown = errors.New("the server is shutting down")

// loadGrace is how long a load whose context ended is still waited for, so that
// a Loader that honours its context reports its own reason (a start function
// cut at the deadline) rather than ErrLoadTimeout's.
const loadGrace = time.Second

// loadJob is the load of one unit key, shared by every build that needs it: a
// build that a newer reload superseded and the newer one wait on the same job
// instead of loading the module twice.
type loadJob struct {
	key  string
	done chan struct{} // closed once eval/err are final
	eval Evaluator
	err  error
	// holders are the builds that will take the result (or give it up);
	// claimed is set when one took eval into its policy set, which owns it
	// from then on. An eval nobody claimed is closed.
	holders int
	claimed bool
	// running: the Loader's call has not returned; a job past its deadline
	// stays (failed) in the table until it does, so that a stuck load is not
	// started again on every reload.
	running bool
}

// loadRunner runs the unit loads of every build of the server: at most
// len(slots) at a time, each under its deadline, one job per unit key. A
// load past its deadline gives its slot back and fails its unit; the call
// goes on in the background (wazero's compiler cannot be interrupted) and
// what it returns late is closed.
type loadRunner struct {
	l       Loader
	timeout time.Duration
	base    context.Context // ends at Shutdown
	slots   chan struct{}
	onLate  func(key string, took time.Duration) // a load returned after its deadline (log)

	mu   sync.Mutex
	jobs map[string]*loadJob
}

// join returns the job loading key, and starts it (loading spec) when there
// is none. The caller must release it.
func (r *loadRunner) join(key string, spec policy.Spec) *loadJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[key]; ok {
		j.holders++
		return j
	}
	j := &loadJob{key: key, done: make(chan struct{}), holders: 1, running: true}
	r.jobs[key] = j
	go r.run(j, spec)
	return j
}

type loadResult struct {
	eval Evaluator
	err  error
}

func (r *loadRunner) run(j *loadJob, spec policy.Spec) {
	select {
	case r.slots <- struct{}{}:
	case <-r.base.Done():
		r.finish(j, nil, errShutdown, true)
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.base, r.timeout)
	res := make(chan loadResult, 1)
	go func() {
		ev, err := r.l.Load(ctx, spec)
		res <- loadResult{ev, err}
	}()
	deadline := func(err error) error {
		if r.base.Err() != nil {
			return errShutdown
		}
		if err == nil {
			return fmt.Errorf("%w: not loaded within %s (--policy-load-timeout)", ErrLoadTimeout, r.timeout)
		}
		return fmt.Errorf("%w: not loaded within %s (--policy-load-timeout): %w", ErrLoadTimeout, r.timeout, err)
	}
	var x loadResult
	select {
	case x = <-res:
	case <-ctx.Done():
		grace := time.NewTimer(loadGrace)
		select {
		case x = <-res:
			grace.Stop()
		case <-grace.C:
			// Stuck: give the slot back and fail the unit now; collect the call later.
			<-r.slots
			r.finish(j, nil, deadline(nil), false)
			x = <-res
			cancel()
			if x.eval != nil {
				x.eval.Close(context.Background())
			}
			if r.onLate != nil {
				r.onLate(j.key, time.Since(start))
			}
			r.mu.Lock()
			j.running = false
			if j.holders == 0 && r.jobs[j.key] == j {
				delete(r.jobs, j.key)
			}
			r.mu.Unlock()
			return
		}
	}
	expired := errors.Is(ctx.Err(), context.DeadlineExceeded) // before cancel, which sets ctx.Err too
	cancel()
	<-r.slots
	if x.err != nil && (expired || r.base.Err() != nil) {
		x.err = deadline(x.err)
	}
	r.finish(j, x.eval, x.err, true)
}

// finish sets j's result and wakes its holders.
func (r *loadRunner) finish(j *loadJob, ev Evaluator, err error, returned bool) {
	r.mu.Lock()
	j.eval, j.err = ev, err
	if returned {
		j.running = false
	}
	close(j.done)
	orphan := r.settleLocked(j)
	r.mu.Unlock()
	if orphan != nil {
		orphan.Close(context.Background())
	}
}

// release gives up the caller's hold on j; claim says that it took j's eval
// into a policy set (only after j is done).
func (r *loadRunner) release(j *loadJob, claim bool) {
	r.mu.Lock()
	j.holders--
	if claim {
		j.claimed = true
	}
	orphan := r.settleLocked(j)
	r.mu.Unlock()
	if orphan != nil {
		orphan.Close(context.Background())
	}
}

// settleLocked forgets j once it is done and held by nobody, and returns its
// eval when nobody claimed it (for the caller to close, unlocked).
func (r *loadRunner) settleLocked(j *loadJob) Evaluator {
	if j.holders > 0 {
		return nil
	}
	select {
	case <-j.done:
	default:
		return nil // finish will see it
	}
	if !j.running && r.jobs[j.key] == j {
		delete(r.jobs, j.key)
	}
	if j.claimed || j.eval == nil {
		return nil
	}
	ev := j.eval
	j.eval = nil
	return ev
}
