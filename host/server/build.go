package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/redact"
)

// ErrSuperseded: a reload (or the start-up load) stopped waiting for its
// policies because a newer reload took over; what it had loaded serves.
var ErrSuperseded = errors.New("superseded by a newer reload")

type buildStats struct {
	loaded, reused, failed int
}

// building is one configuration being loaded (the start-up one or a
// reload's). Its policies load in parallel, each on its own (loadRunner);
// each one that settles (loaded or failed) is published at once in a new
// policy set, so a slow or stuck load never holds back the others, and a
// newer reload supersedes it without waiting for it.
//
// Until a policy of the configuration settles, the published set serves the
// previous set's entry for its id (the previous version of a changed policy,
// the last outcome of an unchanged one), or a placeholder that answers 503
// for a new one. Fields below entries are guarded by Server.pubMu.
type building struct {
	s       *Server
	cfg     *config.Config
	src     []byte
	digest  string
	trigger string
	start   time.Time
	// ctx ends when a newer build supersedes this one, when the caller's
	// context ends, or at Shutdown: the build stops publishing.
	ctx    context.Context
	cancel context.CancelFunc
	stopAt func() bool

	entries map[string]*entry
	// shadows are the candidates of the configuration's policies, by id.
	// Their loads are not counted in units: the build finishes (readiness,
	// Reload's outcome) with the serving versions, and each candidate is
	// published when its own load ends.
	shadows map[string]*shadow

	units      int    // unit loads not settled yet
	gen        uint64 // set by the first publish (0: nothing published)
	stats      buildStats
	superseded bool
	finished   bool
	err        error         // the outcome once finished (ErrPolicyLoad...)
	loadErrs   error         // with err: each policy's load error
	done       chan struct{} // closed once finished
	progress   *loadProgress // the start-up progress, until a build finished once
}

type buildJob struct {
	e    *entry
	u    *unit
	car  []config.ContextAwareResource
	caps []string
	// shadow: u is a unit of the policy's candidate (e is the candidate's entry)
	shadow bool
}

// startBuild starts loading cfg, superseding the build in progress if any,
// and publishes at once what it can (placeholders, removals, unchanged
// policies). The caller holds reloadMu.
func (s *Server) startBuild(ctx context.Context, cfg *config.Config, src []byte, trigger string) *building {
	b := &building{s: s, cfg: cfg, src: src, trigger: trigger, start: time.Now(), entries: map[string]*entry{}, done: make(chan struct{})}
	if src != nil {
		b.digest = status.Digest(src)
	}
	b.ctx, b.cancel = context.WithCancel(s.base)
	b.stopAt = context.AfterFunc(ctx, b.cancel)
	var jobs []buildJob
	for i := range cfg.Policies {
		p := cfg.Policies[i]
		e := &entry{cfg: p}
		b.entries[p.ID] = e
		if p.IsGroup() {
			e.members = map[string]*unit{}
			for _, m := range p.Group.Members {
				u := &unit{id: p.ID + "/" + m.Name, module: m.Module, settings: m.Settings, timeout: m.Timeout}
				e.members[m.Name] = u
				jobs = append(jobs, buildJob{e, u, m.ContextAwareResources, m.HostCapabilities, false})
			}
			e.pending = len(e.members)
		} else {
			e.unit = &unit{id: p.ID, module: p.Module, settings: p.Settings, timeout: p.Timeout}
			jobs = append(jobs, buildJob{e, e.unit, p.ContextAwareResources, p.HostCapabilities, false})
			e.pending = 1
		}
	}
	b.units = len(jobs)
	for i := range cfg.Policies {
		sp := cfg.Policies[i].ShadowPolicy()
		if sp == nil {
			continue
		}
		if b.shadows == nil {
			b.shadows = map[string]*shadow{}
		}
		se := &entry{cfg: *sp}
		b.shadows[sp.ID] = newShadow(se)
		sid := sp.ID + shadowSuffix
		if sp.IsGroup() {
			se.members = map[string]*unit{}
			for _, m := range sp.Group.Members {
				u := &unit{id: sid + "/" + m.Name, module: m.Module, settings: m.Settings, timeout: m.Timeout}
				se.members[m.Name] = u
				jobs = append(jobs, buildJob{se, u, m.ContextAwareResources, m.HostCapabilities, true})
			}
			se.pending = len(se.members)
		} else {
			se.unit = &unit{id: sid, module: sp.Module, settings: sp.Settings, timeout: sp.Timeout}
			jobs = append(jobs, buildJob{se, se.unit, sp.ContextAwareResources, sp.HostCapabilities, true})
			se.pending = 1
		}
	}

	s.pubMu.Lock()
	if prev := s.latest; prev != nil && !prev.finished {
		prev.superseded = true
		prev.cancel()
	}
	s.latest = b
	if !s.settledOnce.Load() {
		b.progress = newLoadProgress(cfg, s.m.policiesLoading)
		s.loading.Store(b.progress)
		for _, e := range b.entries {
			if e.pending == 0 {
				b.progress.settled(e)
			}
		}
	}
	s.publishLocked(b)
	if b.units == 0 {
		s.finishLocked(b)
	}
	s.pubMu.Unlock()

	fetch := b.fetcher()
	for _, j := range jobs {
		go b.loadUnit(j, fetch)
	}
	return b
}

type fetched struct {
	once     sync.Once
	wasm     []byte
	digest   string
	manifest string
	err      error
}

// fetcher fetches each URI of the build once, under the load deadline.
func (b *building) fetcher() func(uri string) *fetched {
	var mu sync.Mutex
	m := map[string]*fetched{}
	return func(uri string) *fetched {
		mu.Lock()
		f, ok := m[uri]
		if !ok {
			f = &fetched{}
			m[uri] = f
		}
		mu.Unlock()
		f.once.Do(func() {
			ctx, cancel := context.WithTimeout(b.ctx, b.s.runner.timeout)
			defer cancel()
			if ml, ok := b.s.o.Loader.(manifestLoader); ok {
				f.wasm, f.digest, f.manifest, f.err = ml.ResolveManifest(ctx, uri)
			} else {
				f.wasm, f.digest, f.err = b.s.o.Loader.Resolve(ctx, uri)
			}
		})
		return f
	}
}

// loadUnit fetches and loads j's unit (or reuses the serving set's unit of
// the same key), then settles it.
func (b *building) loadUnit(j buildJob, fetch func(string) *fetched) {
	s, u := b.s, j.u
	o := &b.cfg.Options
	var job *loadJob
	reused := false
	func() {
		f := fetch(u.module)
		if f.err != nil {
			u.err = redact.Error(f.err, u.module) // shown in logs, GET /policies and answers
			return
		}
		timeout := u.timeout
		if timeout <= 0 {
			timeout = o.PolicyTimeout
		}
		u.digest, u.manifest = f.digest, f.manifest
		u.key = unitKey(u.id, f.digest, u.settings, timeout, o, j.car, j.caps)
		if cur := s.cur.Load(); cur != nil {
			if ou, ok := cur.units[u.key]; ok && ou.eval != nil {
				u.eval, u.loadedAt, reused = ou.eval, ou.loadedAt, true
				return
			}
		}
		spec := policy.Spec{
			ID: u.id, Module: f.wasm, Digest: f.digest, Settings: u.settings, Timeout: timeout,
			MemoryLimitBytes: uint64(o.MemoryLimitBytes), PoolSize: o.Workers,
			ShareGroup: grantsKey(j.car, j.caps),
		}
		if j.shadow {
			// a candidate runs on the shadow workers only, and never takes an
			// instance from a pool the serving versions share
			spec.PoolSize = min(o.Workers, o.EffectiveShadowWorkers())
			spec.ShareGroup += "\x00shadow"
		}
		if hc := hostCallsOf(s.o.Loader); hc != nil {
			var err error
			if spec.HostCalls, err = hc(u.id, j.car, j.caps); err != nil {
				u.err = redact.Error(err, u.module)
				return
			}
			spec.HostCallsInline = true // HostCallsFunc's handlers return by the deadline
		}
		if cf := clusterOf(s.o.Loader); cf != nil && len(j.car) > 0 {
			spec.Cluster = cf(u.id, j.car)
		}
		job = s.runner.join(u.key, spec)
	}()
	if job != nil {
		select {
		case <-job.done:
		case <-b.ctx.Done():
			s.runner.release(job, false)
			return
		}
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if b.ctx.Err() != nil {
		if job != nil {
			s.runner.release(job, false)
		}
		return
	}
	if job != nil {
		u.eval = job.eval
		if job.err != nil {
			u.err = redact.Error(job.err, u.module)
		} else {
			u.loadedAt = time.Now()
		}
		s.runner.release(job, u.eval != nil)
	}
	if j.shadow {
		if j.e.pending--; j.e.pending == 0 {
			j.e.settle()
			if j.e.err != nil {
				logLoadError(s.log, "the shadow of a policy failed to load; the serving version is unaffected", j.e.cfg.ID, j.e.err)
			}
			s.publishLocked(b)
		}
		return
	}
	switch {
	case reused:
		b.stats.reused++
	case u.err != nil:
		b.stats.failed++
	default:
		b.stats.loaded++
	}
	b.units--
	if j.e.pending--; j.e.pending == 0 {
		j.e.settle()
		if b.progress != nil {
			b.progress.settled(j.e)
		}
		if j.e.err != nil && b.trigger == "start" {
			logLoadError(s.log, "policy failed to load; its endpoint answers 500 until a reload fixes it", j.e.cfg.ID, j.e.err)
		}
		s.publishLocked(b)
	}
	if b.units == 0 {
		s.finishLocked(b)
	}
}

// publishLocked swaps in the set that b's configuration gives now, unless it
// serves the same as the current one. The caller holds pubMu.
func (s *Server) publishLocked(b *building) {
	if b.ctx.Err() != nil || s.closing.Load() {
		return
	}
	cur := s.cur.Load()
	next := newSet(b.gen, b.cfg)
	next.source, next.digest = b.src, b.digest
	for id, e := range b.entries {
		var ce *entry
		if cur != nil {
			ce = cur.entries[id]
		}
		switch {
		case e.pending > 0:
			switch {
			case ce == nil || ce.placeholder():
				next.entries[id] = &entry{cfg: e.cfg, loading: true}
			case ce.loading:
				next.entries[id] = ce
			case reflect.DeepEqual(ce.cfg, e.cfg), ce.stale != nil && reflect.DeepEqual(ce.staleCfg, e.cfg):
				next.entries[id] = ce // the last outcome of the same configuration
			default: // the previous version serves until the new one settles
				next.entries[id] = &entry{cfg: ce.cfg, unit: ce.unit, members: ce.members, err: ce.err, stale: ce.stale, staleCfg: ce.staleCfg, loading: true}
			}
		case e.err != nil && ce != nil && ce.serves() && !refusesPrevious(e.err):
			// a reload never makes anything worse: the previous version keeps serving
			next.entries[id] = &entry{cfg: ce.cfg, unit: ce.unit, members: ce.members, stale: e.err, staleCfg: e.cfg}
		default:
			next.entries[id] = e
		}
	}
	for id, sh := range b.shadows {
		var cs *shadow
		if cur != nil {
			cs = cur.shadows[id]
		}
		if next.shadows == nil {
			next.shadows = map[string]*shadow{}
		}
		switch {
		case sh.e.pending > 0:
			if cs != nil && reflect.DeepEqual(cs.e.cfg, sh.e.cfg) {
				next.shadows[id] = cs // the same candidate: its last outcome, or its placeholder
			} else {
				next.shadows[id] = newShadow(&entry{cfg: sh.e.cfg, loading: true})
			}
		case cs != nil && cs.e.err == nil && sh.e.err == nil && !cs.e.loading && sameEvaluators(cs.e, sh.e):
			next.shadows[id] = cs // the same loaded candidate keeps its counts
		default:
			next.shadows[id] = sh
		}
	}
	for _, e := range next.entries {
		next.addUnits(e)
	}
	for _, sh := range next.shadows {
		next.addUnits(sh.e)
	}
	if cur != nil && sameSet(cur, next) {
		return
	}
	if b.gen == 0 {
		b.gen = s.gen.Add(1)
		s.setStatus(status.Reload{Time: time.Now(), OK: true, Trigger: b.trigger, Digest: b.digest})
	}
	next.gen = b.gen
	s.swap(next, b.trigger)
}

// sameSet reports whether b serves what a serves: same file, same policies,
// same evaluators in the same states.
func sameSet(a, b *policySet) bool {
	if !bytes.Equal(a.source, b.source) || a.cfg.Embedded != b.cfg.Embedded || len(a.entries) != len(b.entries) {
		return false
	}
	for id, e := range b.entries {
		o, ok := a.entries[id]
		if !ok || o.loading != e.loading || (o.err == nil) != (e.err == nil) || (o.stale == nil) != (e.stale == nil) || !sameEvaluators(o, e) {
			return false
		}
	}
	if len(a.shadows) != len(b.shadows) {
		return false
	}
	for id, sh := range b.shadows {
		if a.shadows[id] != sh {
			return false
		}
	}
	return true
}

// finishLocked ends b once every unit settled: its outcome, logs and metrics.
// The caller holds pubMu.
func (s *Server) finishLocked(b *building) {
	b.finished = true
	b.stopAt()
	s.settledOnce.Store(true)
	s.m.loadDuration.Observe(time.Since(b.start).Seconds())
	s.countLoads(b.stats)
	set := s.cur.Load()
	if set == nil { // shut down before anything was published
		close(b.done)
		return
	}
	took := time.Since(b.start).Round(time.Millisecond)
	if b.trigger == "start" { // the first configuration
		s.log.Info("policies loaded", "policies", len(set.entries), "failed", len(set.failed()), "duration", took)
		if failed := set.failed(); len(failed) > 0 {
			errs := []error{}
			for _, id := range failed {
				errs = append(errs, fmt.Errorf("policy %s: %w", id, set.entries[id].err))
			}
			b.loadErrs = errors.Join(errs...)
			b.err = fmt.Errorf("%w: %w", ErrPolicyLoad, b.loadErrs)
		}
		close(b.done)
		return
	}
	if b.gen == 0 { // nothing to publish: the file is the one that serves
		s.m.reloads.WithLabelValues("unchanged").Inc()
		s.setStatus(status.Reload{Time: time.Now(), OK: true, Trigger: b.trigger, Digest: b.digest})
		close(b.done)
		return
	}
	var errs []error
	failed, stale := set.failed(), set.staleIDs()
	for _, id := range failed {
		err := set.entries[id].err
		logLoadError(s.log, "policy failed to load; its endpoint answers 500 until a reload fixes it", id, err)
		errs = append(errs, fmt.Errorf("policy %s: %w", id, err))
	}
	for _, id := range stale {
		err := set.entries[id].stale
		logLoadError(s.log, "the new version of a policy failed to load; its previous version keeps serving", id, err)
		errs = append(errs, fmt.Errorf("policy %s (previous version serving): %w", id, err))
	}
	outcome := "success"
	if len(errs) > 0 {
		outcome = "partial"
		b.err = fmt.Errorf("%w: %w", ErrPolicyLoad, errors.Join(errs...))
	}
	s.m.reloads.WithLabelValues(outcome).Inc()
	s.log.Info("configuration reloaded", "trigger", b.trigger, "generation", set.gen, "digest", b.digest, "policies", len(set.entries),
		"loaded", b.stats.loaded, "reused", b.stats.reused, "failed", len(failed), "stale", len(stale), "duration", took)
	close(b.done)
}

// await waits until b finished, was stopped, or ctx ended, and returns its
// outcome.
func (s *Server) await(ctx context.Context, b *building) error {
	select {
	case <-b.done:
	case <-b.ctx.Done():
	case <-ctx.Done():
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	switch {
	case b.finished:
		return b.err
	case b.superseded:
		return ErrSuperseded
	case s.closing.Load():
		return errShutdown
	}
	return ctx.Err()
}

// building reports whether a build is still loading.
func (s *Server) buildInProgress() bool {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	return s.latest != nil && !s.latest.finished && s.latest.ctx.Err() == nil
}
