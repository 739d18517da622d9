package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// Sentinel errors.
var (
	// ErrStrict: --strict and a policy failed to load.
	ErrStrict = errors.New("a policy failed to load")
	// ErrReload: a reload was rejected; the previous configuration keeps serving.
	ErrReload = errors.New("reload rejected")
	// ErrPolicyLoad: a reload was adopted, but some of its policies did not
	// load (failed, or stale: their previous version keeps serving).
	ErrPolicyLoad = errors.New("reload adopted, but some policies did not load")
)

// Options configure a Server. Config and Loader are required.
type Options struct {
	// Config is the initial configuration (its Options carry ports, limits...;
	// its Source is the policies.yml content, to skip reloads of an unchanged
	// file and to report its digest).
	Config *config.Config
	// Loader fetches modules and loads policies.
	Loader Loader
	// Logger for the server (nil discards).
	Logger *slog.Logger
	// TLS serves the webhook; nil with Config.Options.InsecureHTTP serves plain HTTP.
	TLS *tls.Config
	// Reread returns the configuration to switch to on a reload (typically:
	// parse the policies file again) and the bytes it was parsed from. When
	// the file does not parse, it returns the bytes with the error, so that
	// the rejected file's digest is reported. Nil disables reloading.
	Reread func() (*config.Config, []byte, error)
	// WatchFiles are watched for changes that trigger a reload.
	WatchFiles []string
	// API, when set, delivers the configuration's content through the
	// Kubernetes API (the policy server's ConfigMap): each new content
	// reloads at once (trigger "configmap"). Once it has delivered content,
	// every reload reads the newest API content instead of calling Reread,
	// whatever triggered it: the files are the start-up source, and serve
	// only until the API answers, so a file lagging behind never takes the
	// server back to older content. ParseAPI is required with it.
	API APISource
	// ParseAPI parses content delivered by API (as Reread parses the file).
	ParseAPI func(src []byte) (*config.Config, error)
	// Certs, when set, is the certificate reloader behind TLS; the server
	// reports its reloads and expiry as metrics.
	Certs *CertReloader
	// RetryInterval is the first wait before loading again a configuration
	// in which some policies failed to load (doubling up to 5 minutes while
	// they keep failing). Zero means 30 s; negative disables retries.
	RetryInterval time.Duration
	// Metrics are more collectors served on /metrics (the host
	// capabilities' tollgate_capability_*, the guest log's dropped lines).
	// A vector's series labelled policy=ID go when a reload removes that
	// policy, as the server's own do.
	Metrics []prometheus.Collector
}

// Server is the admission webhook.
type Server struct {
	o       Options
	opts    config.Options
	log     *slog.Logger
	m       *metrics
	cur     atomic.Pointer[policySet]
	gen     atomic.Uint64
	lim     *limiter
	bodies  *bodyBudget
	ready   atomic.Bool
	closing atomic.Bool
	// loading is the start-up load's progress, shown until the first set serves.
	loading     *loadProgress
	loadStarted atomic.Bool
	// fault, once set, is why the server is broken (a --strict load that
	// failed, the webhook's serving loop that died): /livez answers 503.
	fault atomic.Pointer[error]
	// draining is set by Drain: unready, and every webhook response closes
	// its connection.
	draining atomic.Bool

	reloadMu   sync.Mutex
	lastReload status.Reload
	statusMu   sync.RWMutex

	hook    *http.Server
	probe   *http.Server
	hookLn  net.Listener
	probeLn net.Listener
	bg      sync.WaitGroup
	stop    chan struct{}
	api     *apiState // nil without Options.API
	retired sync.WaitGroup
	// lastCloser is closed when the most recently retired set has closed
	// its policies; each retirement waits for the previous one, so a policy
	// shared by consecutive sets is closed only after every set that used it
	// drained.
	lastCloser chan struct{}
	// swapMu orders a swap and a retired set's dropRemoved, so that a policy a
	// later reload serves again is not dropped (lane and series) under its requests
	swapMu sync.Mutex
}

// New builds the server and loads the initial policy set: Open, then Load.
// Policies that fail to load are served as 500 errors unless
// Config.Options.Strict, where New fails.
func New(ctx context.Context, o Options) (*Server, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	if err := s.Load(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Open builds the server without loading its policies. Then ServeProbes (so
// that the probe port answers while the policies load), Load, and Start.
func Open(o Options) (*Server, error) {
	if o.Config == nil || o.Loader == nil {
		return nil, errors.New("server: Config and Loader are required")
	}
	if o.API != nil && o.ParseAPI == nil {
		return nil, errors.New("server: API needs ParseAPI")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, opts: o.Config.Options, log: o.Logger, m: newMetrics(), stop: make(chan struct{})}
	s.lim = s.newLimiter()
	for _, c := range o.Metrics {
		s.m.addCollector(c)
	}
	if o.API != nil {
		s.api = newAPIState(s.m.reg)
	}
	s.loading = newLoadProgress(o.Config, s.m.policiesLoading)
	if o.Certs != nil {
		o.Certs.SetHook(s.certReloadHook())
	}
	return s, nil
}

// Load loads the initial policy set (all policies in parallel); call it once,
// between Open and Start. While it runs, the probe port (ServeProbes) answers
// /livez 200, /readiness 503 with how many policies are still loading, and
// /policies with each policy's state. Policies that fail to load are served
// as 500 errors unless Config.Options.Strict, where Load fails, and /livez
// answers 503 from then on.
func (s *Server) Load(ctx context.Context) error {
	if !s.loadStarted.CompareAndSwap(false, true) {
		return errors.New("server: Load called twice")
	}
	cfg := s.o.Config
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "warning", w)
	}
	s.warnContextAware(cfg)
	s.log.Info("loading policies", "policies", len(cfg.Policies))
	start := time.Now()
	set, st := build(ctx, s.o.Loader, cfg, s.gen.Add(1), nil, s.loading.settled)
	set.setSource(cfg.Source)
	s.m.loadDuration.Observe(time.Since(start).Seconds())
	s.countLoads(st)
	for _, id := range set.failed() {
		logLoadError(s.log, "policy failed to load; its endpoint answers 500 until a reload fixes it", id, set.entries[id].err)
	}
	if failed := set.failed(); len(failed) > 0 && s.opts.Strict {
		closeUnshared(ctx, set, nil)
		errs := []error{}
		for _, id := range failed {
			errs = append(errs, fmt.Errorf("policy %s: %w", id, set.entries[id].err))
		}
		err := fmt.Errorf("%w (--strict): %w", ErrStrict, errors.Join(errs...))
		s.setFault(err)
		return err
	}
	s.log.Info("policies loaded", "policies", len(set.entries), "failed", len(set.failed()), "duration", time.Since(start).Round(time.Millisecond))
	s.reloadMu.Lock() // Shutdown closes what serves once it holds it
	defer s.reloadMu.Unlock()
	if s.closing.Load() {
		closeUnshared(ctx, set, nil)
		return errors.New("server: shut down while loading")
	}
	s.swap(set, "start")
	s.setStatus(status.Reload{Time: time.Now(), OK: true, Trigger: "start", Digest: set.digest})
	return nil
}

// setFault records that the server is broken (the first cause wins): /livez
// answers 503 with it, and the server is unready.
func (s *Server) setFault(err error) {
	s.fault.CompareAndSwap(nil, &err)
	s.ready.Store(false)
}

func (s *Server) certReloadHook() func(ok bool, notAfter time.Time) {
	return func(ok bool, notAfter time.Time) {
		if ok {
			s.m.certReloads.WithLabelValues("success").Inc()
			s.m.certNotAfter.Set(float64(notAfter.Unix()))
		} else {
			s.m.certReloads.WithLabelValues("failure").Inc()
		}
	}
}

// warnContextAware says, when the loader has no host capabilities (no
// HostLoader.HostCalls), that a context-aware policy loads but its
// kubernetes/* host calls get an error.
func (s *Server) warnContextAware(cfg *config.Config) {
	if hostCallsOf(s.o.Loader) != nil {
		return // served by the loader's host capabilities
	}
	for _, p := range cfg.Policies {
		n := len(p.ContextAwareResources)
		if p.Group != nil {
			for _, m := range p.Group.Members {
				n += len(m.ContextAwareResources)
			}
		}
		if n > 0 {
			s.log.Warn("contextAwareResources are not served by this server yet: the policy's kubernetes host calls will fail", "policy", p.ID)
		}
	}
}

func (s *Server) countLoads(st buildStats) {
	s.m.unitsLoaded.WithLabelValues("loaded").Add(float64(st.loaded))
	s.m.unitsLoaded.WithLabelValues("reused").Add(float64(st.reused))
	s.m.unitsLoaded.WithLabelValues("failed").Add(float64(st.failed))
}

func (s *Server) setStatus(r status.Reload) {
	s.statusMu.Lock()
	s.lastReload = r
	s.statusMu.Unlock()
}

// swap installs set and retires the previous one: it closes the previous
// set's unshared policies once its in-flight requests finished.
func (s *Server) swap(set *policySet, trigger string) {
	s.swapMu.Lock()
	old := s.cur.Swap(set)
	s.lim.prune(func(id string) bool { _, ok := set.entries[id]; return ok })
	s.swapMu.Unlock()
	if old != nil {
		for id, e := range set.entries {
			if oe, ok := old.entries[id]; ok && !sameEvaluators(oe, e) {
				s.lim.reset(id) // a new version does not inherit the old one's cool-down
			}
		}
	}
	s.m.generation.Set(float64(set.gen))
	s.m.lastReload.SetToCurrentTime()
	s.m.policyLoaded.Reset()
	s.m.policyStale.Reset()
	for id, e := range set.entries {
		s.m.policyLoaded.WithLabelValues(id).Set(boolValue(e.err == nil))
		s.m.policyStale.WithLabelValues(id).Set(boolValue(e.stale != nil))
	}
	if old == nil {
		return
	}
	old.retire()
	prev := s.lastCloser
	done := make(chan struct{})
	s.lastCloser = done
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		defer close(done)
		<-old.drained
		if prev != nil {
			<-prev
		}
		n := closeUnshared(context.Background(), old, set)
		s.dropRemoved(old)
		s.log.Debug("retired policy set", "generation", old.gen, "closed", n, "trigger", trigger)
	}()
}

// dropRemoved forgets the policies of old, a drained set, that the serving
// set does not have: their limiter lanes and metric series. It runs once old
// drained since its last requests update both.
func (s *Server) dropRemoved(old *policySet) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	cur := s.cur.Load()
	serving := func(id string) bool { _, ok := cur.entries[id]; return ok }
	s.lim.prune(serving)
	for id := range old.entries {
		if !serving(id) {
			s.m.dropPolicy(id)
		}
	}
}

// sameEvaluators reports whether b serves a's loaded policy (or members),
// as a reload that changed nothing about it does.
func sameEvaluators(a, b *entry) bool {
	if (a.unit == nil) != (b.unit == nil) {
		return false
	}
	if a.unit != nil {
		return a.unit.eval == b.unit.eval
	}
	if len(a.members) != len(b.members) || a.cfg.Group.Expression != b.cfg.Group.Expression {
		return false
	}
	for n, u := range a.members {
		if v, ok := b.members[n]; !ok || u.eval != v.eval {
			return false
		}
	}
	return true
}

// acquire returns the serving set with a reference the caller must release.
func (s *Server) acquire() *policySet {
	for {
		set := s.cur.Load()
		set.refs.Add(1)
		if s.cur.Load() == set {
			return set
		}
		set.release()
	}
}

// Reload rebuilds the policy set from Options.Reread (or the newest content
// Options.API delivered, once there is one) and swaps it in. force reloads an
// unchanged file too.
//
// A file that cannot be read, parsed or validated is rejected as a whole:
// the current set keeps serving and the error wraps ErrReload. Otherwise the
// file is adopted, with per-policy atomicity, so that a reload never makes
// anything worse: a policy (or group, as one unit) whose new version fails
// to load keeps serving its previous version if it had one that was loaded
// (it is stale), and is failed (its endpoint answers 500) if it is new or was
// failed already. An adopted file with such policies returns an error
// wrapping ErrPolicyLoad that names them.
func (s *Server) Reload(ctx context.Context, trigger string, force bool) error {
	if s.o.Reread == nil && s.o.API == nil {
		return fmt.Errorf("%w: reloading is not configured", ErrReload)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.closing.Load() {
		return fmt.Errorf("%w: the server is shutting down", ErrReload)
	}
	if s.cur.Load() == nil {
		return fmt.Errorf("%w: the first configuration is still loading", ErrReload)
	}
	cfg, src, err := s.reread()
	digest := ""
	if src != nil {
		digest = status.Digest(src)
	}
	fail := func(err error) error {
		s.m.reloads.WithLabelValues("failure").Inc()
		s.setStatus(status.Reload{Time: time.Now(), OK: false, Error: err.Error(), Trigger: trigger, Digest: digest})
		s.log.Error("reload rejected; the previous configuration keeps serving", "trigger", trigger, "digest", digest, "error", err)
		return fmt.Errorf("%w: %w", ErrReload, err)
	}
	if err != nil {
		return fail(err)
	}
	cur := s.cur.Load()
	// unchanged: the file is the one that serves (which a previous rejected
	// attempt may have hidden in lastReload)
	unchanged := func() error {
		s.m.reloads.WithLabelValues("unchanged").Inc()
		s.setStatus(status.Reload{Time: time.Now(), OK: true, Trigger: trigger, Digest: digest})
		return nil
	}
	if !force && src != nil && cur.source != nil && bytes.Equal(src, cur.source) {
		return unchanged()
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "warning", w)
	}
	s.warnContextAware(cfg)
	// Server options (ports, TLS, workers) are fixed at start; a reload
	// changes policies only.
	cfg.Options = s.opts
	start := time.Now()
	set, st := build(ctx, s.o.Loader, cfg, s.gen.Load()+1, cur, nil)
	set.source, set.digest = src, digest // as setSource, without hashing src again
	set.keepLoaded(cur)
	failed, stale := set.failed(), set.staleIDs()
	s.m.loadDuration.Observe(time.Since(start).Seconds())
	s.countLoads(st)
	if ctx.Err() != nil {
		closeUnshared(ctx, set, cur)
		return fail(ctx.Err())
	}
	// A forced reload (SIGHUP, retry) of the same file that loaded nothing
	// new and leaves the same policies failed and stale changes nothing:
	// keep the serving set.
	if st.loaded == 0 && src != nil && bytes.Equal(src, cur.source) &&
		slices.Equal(failed, cur.failed()) && slices.Equal(stale, cur.staleIDs()) {
		return unchanged()
	}
	set.gen = s.gen.Add(1)
	s.swap(set, trigger)
	s.setStatus(status.Reload{Time: time.Now(), OK: true, Trigger: trigger, Digest: digest})
	var errs []error
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
	}
	s.m.reloads.WithLabelValues(outcome).Inc()
	s.log.Info("configuration reloaded", "trigger", trigger, "generation", set.gen, "digest", digest, "policies", len(set.entries),
		"loaded", st.loaded, "reused", st.reused, "failed", len(failed), "stale", len(stale),
		"duration", time.Since(start).Round(time.Millisecond))
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrPolicyLoad, errors.Join(errs...))
	}
	return nil
}

// ServeProbes listens on the probe port and serves /livez, /readiness,
// /metrics and /policies until Shutdown. Call it before Load, so that the
// probes answer while the policies load (a cold compilation takes tens of
// seconds); Start calls it when it was not.
func (s *Server) ServeProbes() error {
	if s.probe != nil {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(s.opts.Addr, strconv.Itoa(s.opts.ReadinessProbePort)))
	if err != nil {
		return fmt.Errorf("--readiness-probe-port: %w", err)
	}
	s.probeLn = ln
	s.probe = &http.Server{
		Handler:           s.probeHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          s.errorLog(),
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := s.probe.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("probe server stopped", "error", err)
		}
	}()
	s.log.Debug("probe port open", "probes", "http://"+ln.Addr().String())
	return nil
}

func (s *Server) errorLog() *log.Logger { return slog.NewLogLogger(s.log.Handler(), slog.LevelDebug) }

// Start listens on the webhook port (and the probe port, unless ServeProbes
// did), after Load, and serves until Shutdown; the server is ready from then on.
func (s *Server) Start(ctx context.Context) error {
	if s.cur.Load() == nil {
		return errors.New("server: Start before Load")
	}
	if !s.opts.InsecureHTTP && s.o.TLS == nil {
		return fmt.Errorf("%w: no certificate (give --cert-file/--key-file, or --insecure-http for local use)", ErrTLS)
	}
	if err := s.ServeProbes(); err != nil {
		return err
	}
	var err error
	if s.hookLn, err = net.Listen("tcp", net.JoinHostPort(s.opts.Addr, strconv.Itoa(s.opts.Port))); err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	s.hook = &http.Server{
		Handler:           s.webhookHandler(),
		ReadHeaderTimeout: min(s.opts.ReadTimeout, 5*time.Second),
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		HTTP2:             h2Buffers,
		ErrorLog:          s.errorLog(),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	s.limitConnections()
	hookLn := s.hookLn
	if !s.opts.InsecureHTTP {
		hookLn = tls.NewListener(s.hookLn, s.o.TLS)
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := s.hook.Serve(hookLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("webhook server stopped", "error", err)
			s.setFault(fmt.Errorf("the webhook server stopped: %w", err))
		}
	}()
	if len(s.o.WatchFiles) > 0 && s.o.Reread != nil {
		s.watch(ctx)
		// Load read the file before the watch existed: a change made while the first set
		// loaded (seconds, minutes for a cold compilation) raised no event and would wait for
		// the next one. Read it once more now that changes are watched (unchanged bytes cost
		// one read).
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			_ = s.Reload(ctx, "file", false)
		}()
	}
	if s.o.API != nil {
		s.watchAPI(ctx)
	}
	if (s.o.Reread != nil || s.o.API != nil) && s.o.RetryInterval >= 0 {
		s.retryFailed(ctx)
	}
	s.ready.Store(!s.draining.Load() && s.fault.Load() == nil)
	scheme := "https"
	if s.opts.InsecureHTTP {
		scheme = "http"
	}
	s.log.Info("serving", "webhook", scheme+"://"+s.hookLn.Addr().String(), "probes", "http://"+s.probeLn.Addr().String())
	return nil
}

// Addr is the webhook's listening address (after Start).
func (s *Server) Addr() string { return s.hookLn.Addr().String() }

// ProbeAddr is the probe port's listening address (after ServeProbes or Start).
func (s *Server) ProbeAddr() string { return s.probeLn.Addr().String() }

// watch reloads when a watched file's directory changes (debounced). Watching
// the directory catches editors that replace files and Kubernetes ConfigMap
// symlink swaps.
func (s *Server) watch(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("cannot watch the configuration; reload with SIGHUP", "error", err)
		return
	}
	names := map[string]bool{}
	for _, f := range s.o.WatchFiles {
		abs, _ := filepath.Abs(f)
		names[filepath.Base(abs)] = true
		if err := w.Add(filepath.Dir(abs)); err != nil {
			s.log.Warn("cannot watch the configuration; reload with SIGHUP", "dir", filepath.Dir(abs), "error", err)
		}
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer w.Close()
		var debounce <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				base := filepath.Base(ev.Name)
				if names[base] || base == "..data" {
					debounce = time.After(200 * time.Millisecond)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("configuration watch error", "error", err)
			case <-debounce:
				debounce = nil
				_ = s.Reload(ctx, "file", false)
			}
		}
	}()
}

// retryFailed reloads the configuration while some of its policies are
// failed or stale (a registry that was down, a module not yet published),
// with exponential backoff, so the server heals without a restart.
func (s *Server) retryFailed(ctx context.Context) {
	first := s.o.RetryInterval
	if first == 0 {
		first = 30 * time.Second
	}
	const maxWait = 5 * time.Minute
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		wait := first
		for {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
			}
			if !s.cur.Load().pending() {
				wait = first
				continue
			}
			_ = s.Reload(ctx, "retry", true)
			if s.cur.Load().pending() {
				wait = min(2*wait, maxWait)
			} else {
				wait = first
			}
		}
	}()
}

// Drain marks the server unready and makes every webhook response close its
// connection ("Connection: close"), while it goes on serving: a client's
// pooled keep-alive connections leave one by one, each after a complete
// answer, instead of being closed under it by Shutdown (where a request
// written on a connection the server is closing fails with a broken pipe or
// a reset). Call it when termination begins, wait for the endpoints to
// follow (serve's --shutdown-delay), then Shutdown.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.ready.Store(false)
}

// Shutdown stops accepting, marks the server unready, drains in-flight
// requests (until ctx ends), then closes every policy.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	s.ready.Store(false)
	close(s.stop)
	var errs []error
	if s.hook != nil {
		if err := s.hook.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("webhook drain: %w", err))
		}
	}
	if s.probe != nil {
		_ = s.probe.Shutdown(ctx)
	}
	s.bg.Wait()
	s.reloadMu.Lock() // no reload may swap (and retire a set) from here on
	defer s.reloadMu.Unlock()
	// retired sets close their policies once their requests finished; if
	// the drain timed out, do not wait for requests that never end
	retiredDone := make(chan struct{})
	go func() { s.retired.Wait(); close(retiredDone) }()
	select {
	case <-retiredDone:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("retired policy sets still busy: %w", ctx.Err()))
	}
	if set := s.cur.Load(); set != nil {
		closeUnshared(ctx, set, nil)
	}
	return errors.Join(errs...)
}

func (s *Server) probeHandler() http.Handler {
	mux := http.NewServeMux()
	// /readiness: serving every policy of the configuration (each loaded or
	// failed) on the webhook port.
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, s.unready(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	// /livez: not wedged. It answers while the policies load, however long
	// a compilation takes, and fails once the server is broken.
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		if err := s.fault.Load(); err != nil {
			http.Error(w, "broken: "+(*err).Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	if e := s.opts.PoliciesEndpoint; e == "" || e == config.PoliciesOnProbe {
		mux.HandleFunc("GET /policies", s.handlePolicies)
	}
	return mux
}

// unready says why /readiness answers 503.
func (s *Server) unready() string {
	fault := s.fault.Load()
	switch {
	case fault != nil:
		return "broken: " + (*fault).Error()
	case s.closing.Load() || s.draining.Load():
		return "shutting down"
	case s.cur.Load() == nil:
		return s.loading.String()
	}
	return "starting: the webhook port is not serving yet"
}

func (s *Server) webhookHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate/{id}", func(w http.ResponseWriter, r *http.Request) { s.handleValidate(w, r, kindValidate) })
	mux.HandleFunc("POST /audit/{id}", func(w http.ResponseWriter, r *http.Request) { s.handleValidate(w, r, kindAudit) })
	mux.HandleFunc("POST /validate_raw/{id}", func(w http.ResponseWriter, r *http.Request) { s.handleValidate(w, r, kindRaw) })
	if s.opts.PoliciesEndpoint == config.PoliciesOnWebhook {
		mux.HandleFunc("GET /policies", s.handlePolicies)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close") // net/http closes the connection after this response
		}
		mux.ServeHTTP(w, r)
	})
}
