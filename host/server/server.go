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
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
	// Tracer, when set, traces each webhook request: a server span continuing
	// the caller's trace context, a span per policy evaluation and group
	// member (host/telemetry makes it from the OTEL_* variables). Nil: no
	// tracing, at no cost.
	Tracer trace.Tracer
	// Propagator reads a request's trace context (nil: W3C trace context
	// and baggage).
	Propagator propagation.TextMapPropagator
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
	shadows *shadowPool
	bodies  *bodyBudget
	ready   atomic.Bool
	closing atomic.Bool
	// loading is the start-up load's progress, shown until a configuration
	// finished loading (settledOnce).
	loading     atomic.Pointer[loadProgress]
	loadStarted atomic.Bool
	first       *building
	// settledOnce: some configuration finished loading (each of its
	// policies loaded or failed); /readiness waits for it.
	settledOnce atomic.Bool
	// base ends at Shutdown: loads and builds stop.
	base       context.Context
	baseCancel context.CancelFunc
	runner     *loadRunner
	// pubMu orders the builds' publications; latest is the newest build.
	pubMu  sync.Mutex
	latest *building
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

	tracer     trace.Tracer // Options.Tracer: nil when not tracing
	propagator propagation.TextMapPropagator
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
	s := &Server{o: o, opts: o.Config.Options, log: o.Logger, m: newMetrics(), stop: make(chan struct{}),
		tracer: o.Tracer, propagator: o.Propagator}
	if s.propagator == nil {
		s.propagator = defaultPropagator
	}
	s.lim = s.newLimiter()
	s.shadows = s.newShadowPool()
	for _, c := range o.Metrics {
		s.m.addCollector(c)
	}
	if o.API != nil {
		s.api = newAPIState(s.m.reg)
	}
	s.loading.Store(newLoadProgress(o.Config, s.m.policiesLoading))
	s.base, s.baseCancel = context.WithCancel(context.Background())
	lt := s.opts.PolicyLoadTimeout
	if lt <= 0 {
		lt = config.Defaults().PolicyLoadTimeout
	}
	s.runner = &loadRunner{l: o.Loader, timeout: lt, base: s.base, slots: make(chan struct{}, max(2, runtime.GOMAXPROCS(0))),
		jobs: map[string]*loadJob{},
		onLate: func(key string, took time.Duration) {
			s.log.Warn("a load that ran past its deadline returned; what it made is closed", "took", took.Round(time.Millisecond))
		}}
	if o.Certs != nil {
		o.Certs.SetHook(s.certReloadHook())
	}
	return s, nil
}

// Load loads the initial policy set (all policies in parallel): Begin, then
// WaitLoaded. Call it once, between Open and Start.
func (s *Server) Load(ctx context.Context) error {
	if err := s.Begin(ctx); err != nil {
		return err
	}
	return s.WaitLoaded(ctx)
}

// Begin starts loading the initial policy set and returns at once: from then
// on the set serves (Start may open the webhook port), each policy as soon as
// its own load ended, and a policy still loading answers 503. Each load has a
// deadline (config.Options.PolicyLoadTimeout) after which its policy is
// failed. While the first configuration loads, the probe port (ServeProbes)
// answers /livez 200, /readiness 503 with how many policies are still
// loading, and /policies with each policy's state.
func (s *Server) Begin(ctx context.Context) error {
	if !s.loadStarted.CompareAndSwap(false, true) {
		return errors.New("server: Load called twice")
	}
	cfg := s.o.Config
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "warning", w)
	}
	s.warnContextAware(cfg)
	s.log.Info("loading policies", "policies", len(cfg.Policies))
	s.reloadMu.Lock() // Shutdown closes what serves once it holds it
	defer s.reloadMu.Unlock()
	if s.closing.Load() {
		return errors.New("server: shut down before loading")
	}
	s.first = s.startBuild(context.WithoutCancel(ctx), cfg, cfg.Source, "start")
	return nil
}

// WaitLoaded waits until every policy of the initial set loaded or failed (or
// a reload superseded it, or ctx ended). Policies that failed to load are
// served as 500 errors unless Config.Options.Strict, where WaitLoaded fails,
// and /livez answers 503 from then on.
func (s *Server) WaitLoaded(ctx context.Context) error {
	if s.first == nil {
		return errors.New("server: WaitLoaded before Begin")
	}
	err := s.await(ctx, s.first)
	if errors.Is(err, ErrSuperseded) {
		return nil
	}
	if err != nil && !errors.Is(err, ErrPolicyLoad) {
		return err
	}
	if err != nil && s.opts.Strict {
		err := fmt.Errorf("%w (--strict): %w", ErrStrict, s.first.loadErrs)
		s.setFault(err)
		s.reloadMu.Lock()
		if set := s.cur.Swap(nil); set != nil && s.hook == nil {
			closeUnshared(context.Background(), set, nil)
		}
		s.reloadMu.Unlock()
		return err
	}
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
		if p.ContextAware() {
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
	serving := func(id string) bool {
		if cur == nil {
			return false
		}
		_, ok := cur.entries[id]
		return ok
	}
	s.lim.prune(serving)
	for id := range old.entries {
		if !serving(id) {
			s.m.dropPolicy(id)
		}
	}
	for id := range old.shadows {
		if cur == nil || cur.shadows[id] == nil {
			s.m.dropPolicy(id + shadowSuffix) // the caller's series of the shadow's units (host calls, guest log)
		}
	}
}

// sameEvaluators reports whether b serves a's loaded policy (or members),
// as a reload that changed nothing about it does.
func sameEvaluators(a, b *entry) bool {
	if (a.unit == nil) != (b.unit == nil) || (a.members == nil) != (b.members == nil) {
		return false
	}
	if a.unit != nil {
		return a.unit.eval == b.unit.eval
	}
	if a.members == nil {
		return true // placeholders
	}
	if len(a.members) != len(b.members) || a.cfg.Group == nil || b.cfg.Group == nil || a.cfg.Group.Expression != b.cfg.Group.Expression {
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
// file is adopted at once, with per-policy atomicity, so that a reload never
// makes anything worse: each policy (or group, as one unit) switches to its
// new version once that loaded, while its previous version (or last outcome)
// serves meanwhile; a new policy answers 503 until it loaded. A policy whose
// new version fails to load keeps serving its previous version if it had one
// that was loaded (it is stale), and is failed (its endpoint answers 500) if
// it is new or was failed already. Reload returns once every policy settled,
// with an error wrapping ErrPolicyLoad that names those that did not load; or
// ErrSuperseded when a newer reload took over first (it does not wait for a
// stuck load: the newer one is adopted at once).
func (s *Server) Reload(ctx context.Context, trigger string, force bool) error {
	b, err := s.startReload(ctx, trigger, force)
	if err != nil || b == nil {
		return err
	}
	return s.await(ctx, b)
}

// RejectConfig reports that a configuration file the server depends on, read
// again by its caller (the signature verification config), was rejected:
// GET /policies' lastReload (OK false, with err and src's digest), the log,
// tollgate_config_reloads_total{outcome="failure"} and
// tollgate_config_last_reload_rejected. What serves is unchanged; the next
// adopted or unchanged reload clears it.
func (s *Server) RejectConfig(trigger string, src []byte, err error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.reject(trigger, src, err)
}

func (s *Server) reject(trigger string, src []byte, err error) {
	digest := ""
	if src != nil {
		digest = status.Digest(src)
	}
	s.m.reloads.WithLabelValues("failure").Inc()
	s.m.configRejected.Set(1)
	s.setStatus(status.Reload{Time: time.Now(), OK: false, Error: err.Error(), Trigger: trigger, Digest: digest})
	s.log.Error("configuration rejected; the previous one keeps serving", "trigger", trigger, "digest", digest, "error", err)
}

// reloadAsync is Reload without waiting for the policies to load (watchers).
func (s *Server) reloadAsync(ctx context.Context, trigger string, force bool) error {
	_, err := s.startReload(ctx, trigger, force)
	return err
}

// startReload rereads the configuration and starts its build; nil when it
// is unchanged.
func (s *Server) startReload(ctx context.Context, trigger string, force bool) (*building, error) {
	if s.o.Reread == nil && s.o.API == nil {
		return nil, fmt.Errorf("%w: reloading is not configured", ErrReload)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.closing.Load() {
		return nil, fmt.Errorf("%w: the server is shutting down", ErrReload)
	}
	cur := s.cur.Load()
	if cur == nil {
		return nil, fmt.Errorf("%w: the first configuration is still loading", ErrReload)
	}
	cfg, src, err := s.reread()
	if err != nil {
		s.reject(trigger, src, err)
		return nil, fmt.Errorf("%w: %w", ErrReload, err)
	}
	digest := ""
	if src != nil {
		digest = status.Digest(src)
	}
	s.m.configRejected.Set(0)
	if !force && src != nil && cur.source != nil && bytes.Equal(src, cur.source) {
		// unchanged: the file is the one that serves (which a previous rejected
		// attempt may have hidden in lastReload)
		s.m.reloads.WithLabelValues("unchanged").Inc()
		s.setStatus(status.Reload{Time: time.Now(), OK: true, Trigger: trigger, Digest: digest})
		return nil, nil
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "warning", w)
	}
	s.warnContextAware(cfg)
	// Server options (ports, TLS, workers) are fixed at start; a reload
	// changes policies only.
	cfg.Options = s.opts
	return s.startBuild(ctx, cfg, src, trigger), nil
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
	hookLn := s.hookLn
	if !s.opts.InsecureHTTP {
		hookLn = tls.NewListener(s.hookLn, s.o.TLS)
	}
	hookLn = s.limitConnections(hookLn)
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
			_ = s.reloadAsync(ctx, "file", false)
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

// Gatherer is the registry served on /metrics (host/telemetry pushes it over
// OTLP when asked to).
func (s *Server) Gatherer() prometheus.Gatherer { return s.m.reg }

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
		retry := time.Duration(0) // the wait before reading a rejected file again
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
				if err := s.reloadAsync(ctx, "file", false); err != nil && errors.Is(err, ErrReload) && !s.closing.Load() {
					// A rejected file (empty or half-written by an editor that truncates
					// first) is read again: the write that completes it may raise no
					// event we see.
					retry = min(max(2*retry, time.Second), 30*time.Second)
					debounce = time.After(retry)
				} else {
					retry = 0
				}
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
			if cur := s.cur.Load(); cur == nil || !cur.pending() || s.buildInProgress() {
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
	// Loads stop: builds stop waiting and publishing, a load still running is
	// abandoned (its result is closed when it returns), none starts.
	s.baseCancel()
	s.pubMu.Lock()
	s.pubMu.Unlock() //nolint:staticcheck // a barrier: no publication runs past here
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
	s.shadows.stop()  // after the webhook's handlers, which queue shadow evaluations
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
		if !s.ready.Load() || !s.settledOnce.Load() {
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
	case s.cur.Load() == nil || !s.settledOnce.Load():
		return s.loading.Load().String()
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
