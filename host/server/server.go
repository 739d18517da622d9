package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate-dev/tollgate/host/config"
)

// Sentinel errors.
var (
	// ErrStrict: --strict and a policy failed to load.
	ErrStrict = errors.New("a policy failed to load")
	// ErrReload: a reload was rejected; the previous configuration keeps serving.
	ErrReload = errors.New("reload rejected")
)

// Options configure a Server. Config and Loader are required.
type Options struct {
	// Config is the initial configuration (its Options carry ports, limits...).
	Config *config.Config
	// Loader fetches modules and loads policies.
	Loader Loader
	// Logger for the server (nil discards).
	Logger *slog.Logger
	// TLS serves the webhook; nil with Config.Options.InsecureHTTP serves plain HTTP.
	TLS *tls.Config
	// Reread returns the configuration to switch to on a reload (typically:
	// parse the policies file again). Nil disables reloading.
	Reread func() (*config.Config, []byte, error)
	// Source is the policies.yml content Config was parsed from (to skip
	// reloads of an unchanged file). May be nil.
	Source []byte
	// WatchFiles are watched for changes that trigger a reload.
	WatchFiles []string
	// Certs, when set, is the certificate reloader behind TLS; the server
	// reports its reloads and expiry as metrics.
	Certs *CertReloader
	// RetryInterval is the first wait before loading again a configuration
	// in which some policies failed to load (doubling up to 5 minutes while
	// they keep failing). Zero means 30 s; negative disables retries.
	RetryInterval time.Duration
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
	ready   atomic.Bool
	closing atomic.Bool

	reloadMu   sync.Mutex
	lastReload reloadStatus
	statusMu   sync.RWMutex

	hook    *http.Server
	probe   *http.Server
	hookLn  net.Listener
	probeLn net.Listener
	bg      sync.WaitGroup
	stop    chan struct{}
	retired sync.WaitGroup
	// lastCloser is closed when the most recently retired set has closed
	// its policies; each retirement waits for the previous one, so a policy
	// shared by consecutive sets is closed only after every set that used it
	// drained.
	lastCloser chan struct{}
}

type reloadStatus struct {
	Time    time.Time `json:"time"`
	OK      bool      `json:"ok"`
	Error   string    `json:"error,omitempty"`
	Trigger string    `json:"trigger"`
}

// New builds the server and loads the initial policy set (all policies in
// parallel). Policies that fail to load are served as 500 errors unless
// Config.Options.Strict, where New fails.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Config == nil || o.Loader == nil {
		return nil, errors.New("server: Config and Loader are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, opts: o.Config.Options, log: o.Logger, m: newMetrics(), stop: make(chan struct{})}
	s.lim = newLimiter(s.opts.Workers, s.opts.EffectiveQueueSize())
	for _, w := range o.Config.Warnings {
		s.log.Warn("configuration warning", "warning", w)
	}
	s.warnContextAware(o.Config)
	start := time.Now()
	set, st := build(ctx, o.Loader, o.Config, s.gen.Add(1), nil)
	set.source = o.Source
	s.m.loadDuration.Observe(time.Since(start).Seconds())
	s.countLoads(st)
	for _, id := range set.failed() {
		s.log.Error("policy failed to load; its endpoint answers 500 until a reload fixes it", "policy", id, "error", set.entries[id].err)
	}
	if failed := set.failed(); len(failed) > 0 && s.opts.Strict {
		closeUnshared(ctx, set, nil)
		errs := []error{}
		for _, id := range failed {
			errs = append(errs, fmt.Errorf("policy %s: %w", id, set.entries[id].err))
		}
		return nil, fmt.Errorf("%w (--strict): %w", ErrStrict, errors.Join(errs...))
	}
	if o.Certs != nil {
		o.Certs.SetHook(s.certReloadHook())
	}
	s.log.Info("policies loaded", "policies", len(set.entries), "failed", len(set.failed()), "duration", time.Since(start).Round(time.Millisecond))
	s.swap(set, "start")
	s.setStatus(reloadStatus{Time: time.Now(), OK: true, Trigger: "start"})
	return s, nil
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

// warnContextAware says that Kubernetes host calls are not served yet: a
// context-aware policy loads, but its kubernetes/* host calls get an error.
func (s *Server) warnContextAware(cfg *config.Config) {
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

func (s *Server) setStatus(r reloadStatus) {
	s.statusMu.Lock()
	s.lastReload = r
	s.statusMu.Unlock()
}

// swap installs set and retires the previous one: it closes the previous
// set's unshared policies once its in-flight requests finished.
func (s *Server) swap(set *policySet, trigger string) {
	old := s.cur.Swap(set)
	s.m.generation.Set(float64(set.gen))
	s.m.lastReload.SetToCurrentTime()
	s.m.policyLoaded.Reset()
	for id, e := range set.entries {
		v := 1.0
		if e.err != nil {
			v = 0
		}
		s.m.policyLoaded.WithLabelValues(id).Set(v)
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
		s.log.Debug("retired policy set", "generation", old.gen, "closed", n, "trigger", trigger)
	}()
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

// Reload rebuilds the policy set from Options.Reread and swaps it in. An
// invalid configuration, or one where a policy fails to load that is loaded
// (or absent) in the serving set, is rejected and the current set keeps
// serving. force reloads an unchanged file too.
func (s *Server) Reload(ctx context.Context, trigger string, force bool) error {
	if s.o.Reread == nil {
		return fmt.Errorf("%w: reloading is not configured", ErrReload)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.closing.Load() {
		return fmt.Errorf("%w: the server is shutting down", ErrReload)
	}
	cfg, src, err := s.o.Reread()
	fail := func(err error) error {
		s.m.reloads.WithLabelValues("failure").Inc()
		s.setStatus(reloadStatus{Time: time.Now(), OK: false, Error: err.Error(), Trigger: trigger})
		s.log.Error("reload rejected; the previous configuration keeps serving", "trigger", trigger, "error", err)
		return fmt.Errorf("%w: %w", ErrReload, err)
	}
	if err != nil {
		return fail(err)
	}
	cur := s.cur.Load()
	if !force && src != nil && cur.source != nil && bytes.Equal(src, cur.source) {
		s.m.reloads.WithLabelValues("unchanged").Inc()
		return nil
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "warning", w)
	}
	s.warnContextAware(cfg)
	// Server options (ports, TLS, workers) are fixed at start; a reload
	// changes policies only.
	cfg.Options = s.opts
	start := time.Now()
	set, st := build(ctx, s.o.Loader, cfg, s.gen.Load()+1, cur)
	set.source = src
	s.m.loadDuration.Observe(time.Since(start).Seconds())
	s.countLoads(st)
	// A reload must not make anything worse: it is rejected when a policy
	// fails to load that the serving set has loaded, or does not have.
	// Policies that were already failing may keep failing (so fixing one
	// policy is not blocked by another that is still broken).
	var errs []error
	for _, id := range set.failed() {
		if old, ok := cur.entries[id]; !ok || old.err == nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", id, set.entries[id].err))
		}
	}
	if len(errs) > 0 {
		closeUnshared(ctx, set, cur)
		return fail(errors.Join(errs...))
	}
	// A forced reload (SIGHUP, retry) of the same file that loaded nothing
	// new and fails the same policies changes nothing: keep the serving set.
	if st.loaded == 0 && src != nil && bytes.Equal(src, cur.source) && slices.Equal(set.failed(), cur.failed()) {
		s.m.reloads.WithLabelValues("unchanged").Inc()
		return nil
	}
	if ctx.Err() != nil {
		closeUnshared(ctx, set, cur)
		return fail(ctx.Err())
	}
	set.gen = s.gen.Add(1)
	s.swap(set, trigger)
	s.m.reloads.WithLabelValues("success").Inc()
	s.setStatus(reloadStatus{Time: time.Now(), OK: true, Trigger: trigger})
	s.log.Info("configuration reloaded", "trigger", trigger, "generation", set.gen, "policies", len(set.entries),
		"loaded", st.loaded, "reused", st.reused, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// Start listens on the webhook and probe ports and serves until Shutdown.
func (s *Server) Start(ctx context.Context) error {
	if !s.opts.InsecureHTTP && s.o.TLS == nil {
		return fmt.Errorf("%w: no certificate (give --cert-file/--key-file, or --insecure-http for local use)", ErrTLS)
	}
	hookAddr := net.JoinHostPort(s.opts.Addr, strconv.Itoa(s.opts.Port))
	probeAddr := net.JoinHostPort(s.opts.Addr, strconv.Itoa(s.opts.ReadinessProbePort))
	var err error
	if s.hookLn, err = net.Listen("tcp", hookAddr); err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	if s.probeLn, err = net.Listen("tcp", probeAddr); err != nil {
		s.hookLn.Close()
		return fmt.Errorf("--readiness-probe-port: %w", err)
	}
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.hook = &http.Server{
		Handler:           s.webhookHandler(),
		ReadHeaderTimeout: min(s.opts.ReadTimeout, 5*time.Second),
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          errLog,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	s.probe = &http.Server{
		Handler:           s.probeHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          errLog,
	}
	hookLn := s.hookLn
	if !s.opts.InsecureHTTP {
		hookLn = tls.NewListener(s.hookLn, s.o.TLS)
	}
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		if err := s.hook.Serve(hookLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("webhook server stopped", "error", err)
		}
	}()
	go func() {
		defer s.bg.Done()
		if err := s.probe.Serve(s.probeLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("probe server stopped", "error", err)
		}
	}()
	if len(s.o.WatchFiles) > 0 && s.o.Reread != nil {
		s.watch(ctx)
	}
	if s.o.Reread != nil && s.o.RetryInterval >= 0 {
		s.retryFailed(ctx)
	}
	s.ready.Store(true)
	scheme := "https"
	if s.opts.InsecureHTTP {
		scheme = "http"
	}
	s.log.Info("serving", "webhook", scheme+"://"+s.hookLn.Addr().String(), "probes", "http://"+s.probeLn.Addr().String())
	return nil
}

// Addr is the webhook's listening address (after Start).
func (s *Server) Addr() string { return s.hookLn.Addr().String() }

// ProbeAddr is the probe port's listening address (after Start).
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

// retryFailed reloads the configuration while some of its policies are not
// loaded (a registry that was down at start, a module not yet published),
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
			if len(s.cur.Load().failed()) == 0 {
				wait = first
				continue
			}
			_ = s.Reload(ctx, "retry", true)
			if len(s.cur.Load().failed()) > 0 {
				wait = min(2*wait, maxWait)
			} else {
				wait = first
			}
		}
	}()
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
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /policies", s.handlePolicies)
	return mux
}

func (s *Server) webhookHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate/{id}", func(w http.ResponseWriter, r *http.Request) { s.handleValidate(w, r, kindValidate) })
	mux.HandleFunc("POST /audit/{id}", func(w http.ResponseWriter, r *http.Request) { s.handleValidate(w, r, kindAudit) })
	mux.HandleFunc("POST /validate_raw/{id}", func(w http.ResponseWriter, r *http.Request) { s.handleValidate(w, r, kindRaw) })
	return mux
}
