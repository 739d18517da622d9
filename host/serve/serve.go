package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/telemetry"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/demo"
)

// Options is what `tollgate serve` was asked for: the server options (flags,
// environment and --config file merged) and the serve-only settings.
type Options struct {
	// Config are the server options; Run may change them only as Load does.
	Config config.Options
	// Logger is the server's log (--log-level, --log-fmt).
	Logger *slog.Logger
	// Stderr receives the notice of a generated certificate (where its CA is).
	Stderr io.Writer

	// PoliciesConfigMap is NAMESPACE/NAME of a ConfigMap whose policies.yml
	// is watched through the Kubernetes API ("" for none).
	PoliciesConfigMap string
	// Kubeconfig and Context choose the Kubernetes client ("": in-cluster,
	// then $KUBECONFIG and ~/.kube/config).
	Kubeconfig, Context string
	// MaxCachedObjects bounds the objects cached per resource that
	// context-aware policies read.
	MaxCachedObjects int

	// VerificationPath is a Kubewarden verification config: only registry://
	// modules whose signatures satisfy it load ("" for none).
	VerificationPath string
	// TrustConfigPath is the Sigstore trust root for keyless signatures.
	TrustConfigPath string
	// VerificationPoll is how often the verification files are looked at
	// (zero: 2 s).
	VerificationPoll time.Duration

	// Demo, when set, is called once the policies loaded and the server
	// serves, with its address and the generated CA file ("" if none): the
	// --demo requests. With DemoExit the server then shuts down.
	Demo     func(addr, caFile string) error
	DemoExit bool

	// Telemetry is the OpenTelemetry export (traces, OTLP metrics), from
	// the OTEL_* variables; the zero value exports nothing.
	Telemetry telemetry.Config
	// Version is the service.version of the exported telemetry.
	Version string
}

// Run serves until ctx ends or SIGTERM/SIGINT; SIGHUP reloads.
func Run(ctx context.Context, o Options) error {
	logger, opts := o.Logger, &o.Config
	cfg, err := config.Load(*opts, demo.Policies())
	if errors.Is(err, config.ErrEmpty) && opts.PoliciesPath != "" {
		// Caught between an editor's truncation and its write: wait for the content, unready.
		cfg, err = awaitPolicies(ctx, opts, err, logger)
	}
	if err != nil {
		return err
	}
	if cfg.Embedded {
		logger.Info("no --policies given: serving the embedded example policies", "policies", policyIDs(cfg))
	}
	logsDropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_policy_log_lines_dropped_total",
		Help: "Log lines of a policy dropped because it logged above its rate limit."}, []string{"policy"})
	host, err := newHost(ctx, opts, logger, logsDropped)
	if err != nil {
		return err
	}
	defer closeHost(host, logger)
	m, err := newModules(o, cfg, host)
	if err != nil {
		return err
	}
	tlsCfg, certs, serverCA, err := serveTLS(ctx, o)
	if err != nil {
		return err
	}
	if certs != nil {
		defer certs.Close()
	}
	so := server.Options{Config: cfg, Loader: m.loader, Logger: logger, TLS: tlsCfg, Certs: certs,
		Reread: reread(*opts, cfg), Metrics: []prometheus.Collector{logsDropped}}
	tel, err := telemetry.New(ctx, o.Telemetry, telemetry.Options{Logger: logger.With("component", "telemetry"), ServiceVersion: o.Version})
	if err != nil {
		return err
	}
	defer shutdownTelemetry(tel, logger)
	so.Tracer, so.Propagator = tel.Tracer(), tel.Propagator()
	so.Metrics = append(so.Metrics, tel.Collectors()...)
	closeCapabilities, err := withCapabilities(o, m, &so, cfg)
	if err != nil {
		return err
	}
	defer closeCapabilities()
	if opts.Watch && !cfg.Embedded {
		so.WatchFiles = []string{opts.PoliciesPath}
	}
	if err := withPoliciesConfigMap(o, &so, cfg.Sources); err != nil {
		return err
	}
	// signals are caught before the server is reachable: a SIGHUP must never
	// meet the default action (exit)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	srv, err := start(ctx, so, opts, sigs)
	if err != nil {
		return err
	}
	tel.PushMetrics(srv.Gatherer()) // with OTEL_METRICS_EXPORTER=otlp
	if m.verification != nil {
		go watchVerification(ctx, m.verification, o, srv)
	}
	if o.Demo != nil {
		_ = srv.WaitLoaded(ctx) // the sample requests go to loaded policies
		err := o.Demo(srv.Addr(), serverCA)
		if err != nil {
			logger.Error("demo requests failed", "error", err)
		}
		if o.DemoExit {
			return errors.Join(err, shutdownBounded(srv, opts.ShutdownTimeout))
		}
	}
	return serveUntilSignal(ctx, srv, opts, sigs, logger)
}

// shutdownTelemetry sends the spans still queued, for at most 5 s: a
// collector that is down does not hold the exit back longer.
func shutdownTelemetry(tel *telemetry.Telemetry, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		logger.Warn("telemetry: the last spans were not all exported", "error", err)
	}
}

// newHost is the Wasm host with the server's limits, cache and budget.
func newHost(ctx context.Context, o *config.Options, logger *slog.Logger, logsDropped *prometheus.CounterVec) (*policy.Host, error) {
	return policy.NewHost(ctx, policy.HostOptions{CacheDir: o.CacheDir, Logger: logger,
		GuestLogDropped:       func(id string) { logsDropped.WithLabelValues(id).Inc() },
		InstanceRecycleGrowth: recycleGrowth(o.InstanceRecycleGrowth),
		Limits: wasm.Limits{ModuleBytes: uint64(o.MaxModuleBytes), BodyBytes: uint32(o.MaxFunctionBodyBytes),
			Locals: uint32(o.MaxFunctionLocals), Nesting: uint32(o.MaxNestingDepth)},
		CompileTimeout: o.CompileTimeout, CompileMemoryBytes: uint64(o.CompileMemoryLimit),
		MemoryBudgetBytes: uint64(o.PoliciesMemoryBudget)})
}

// closeHost closes the host, bounded: a load abandoned at its deadline may
// still hold the runtime.
func closeHost(host *policy.Host, logger *slog.Logger) {
	done := make(chan struct{})
	go func() { host.Close(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		logger.Warn("the Wasm runtime did not close within 5s (a load still running); exiting")
	}
}

// recycleGrowth is --instance-recycle-growth as policy.HostOptions wants it
// (0, never, is negative there; 0 there is the default).
func recycleGrowth(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}

// reread is the server's Reread: the policies file parsed again (the
// embedded policies when no file was given), with the sources read at start.
func reread(opts config.Options, cfg *config.Config) func() (*config.Config, []byte, error) {
	return func() (*config.Config, []byte, error) {
		if cfg.Embedded {
			c, err := config.Load(opts, demo.Policies())
			return c, nil, err
		}
		b, err := os.ReadFile(opts.PoliciesPath)
		if err != nil {
			return nil, nil, fmt.Errorf("--policies: %w", err)
		}
		pols, warns, err := config.ParsePolicies(opts.PoliciesPath, b)
		if err != nil {
			return nil, b, err // b: the rejected file's digest is reported
		}
		return &config.Config{Options: opts, Policies: pols, Warnings: warns, Sources: cfg.Sources, Source: b}, b, nil
	}
}

// start opens the server: the probe port first (it answers before the
// policies load: a cold compilation takes tens of seconds; /livez 200,
// /readiness 503 until Start), then the loads, then the webhook port. Each
// policy serves as soon as its own load ended (a slow or stuck one holds
// back nothing but itself, up to --policy-load-timeout); with --strict every
// policy must load before the webhook port opens.
func start(ctx context.Context, so server.Options, o *config.Options, sigs <-chan os.Signal) (*server.Server, error) {
	srv, err := server.Open(so)
	if err != nil {
		return nil, err
	}
	if err := srv.ServeProbes(); err != nil {
		return nil, err
	}
	if err := srv.Begin(ctx); err != nil {
		srv.Shutdown(context.Background())
		return nil, err
	}
	if o.Strict {
		loaded := make(chan error, 1)
		go func() { loaded <- srv.WaitLoaded(ctx) }()
		select {
		case err = <-loaded:
		case sig := <-sigs:
			for sig == syscall.SIGHUP { // reloading waits for the first configuration
				sig = <-sigs
			}
			shutdownBounded(srv, o.ShutdownTimeout)
			return nil, errors.New("interrupted while loading the policies")
		}
		if err != nil {
			shutdownBounded(srv, o.ShutdownTimeout)
			return nil, err
		}
	}
	if err := srv.Start(ctx); err != nil {
		shutdownBounded(srv, o.ShutdownTimeout)
		return nil, err
	}
	return srv, nil
}

// serveUntilSignal serves until ctx ends or SIGTERM/SIGINT, reloading on
// SIGHUP, then drains.
func serveUntilSignal(ctx context.Context, srv *server.Server, o *config.Options, sigs <-chan os.Signal, logger *slog.Logger) error {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				go srv.Reload(ctx, "SIGHUP", true)
				continue
			}
			if sig == syscall.SIGTERM && o.ShutdownDelay > 0 {
				// Termination (a kubelet's SIGTERM): keep serving, unready, each
				// connection closed after its answer, while the endpoints follow.
				srv.Drain()
				logger.Info("terminating: unready, closing connections after each answer", "signal", sig.String(), "delay", o.ShutdownDelay)
				select {
				case <-time.After(o.ShutdownDelay):
				case <-sigs: // a second signal: no more waiting
				case <-ctx.Done():
				}
			}
			logger.Info("shutting down: draining in-flight requests", "signal", sig.String(), "timeout", o.ShutdownTimeout)
		case <-ctx.Done():
			logger.Info("shutting down: draining in-flight requests", "timeout", o.ShutdownTimeout)
		}
		return shutdownBounded(srv, o.ShutdownTimeout)
	}
}

// awaitPolicies is the start-up with an empty policies.yml (first, the error
// it gave): rather than serve nothing, or exit (a crash loop, when a person's
// editor emptied the file for a moment), it opens the probe port, where
// /livez answers 200 and /readiness 503 with the error, and reads the file
// again every half second until it has content. Any other error ends it, as
// does SIGTERM or SIGINT.
func awaitPolicies(ctx context.Context, o *config.Options, first error, logger *slog.Logger) (*config.Config, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Addr, strconv.Itoa(o.ReadinessProbePort)))
	if err != nil {
		return nil, fmt.Errorf("--readiness-probe-port: %w", err)
	}
	var last atomic.Pointer[error]
	last.Store(&first)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no configuration: "+(*last.Load()).Error(), http.StatusServiceUnavailable)
	})
	probe := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go probe.Serve(ln)
	defer probe.Close()
	sctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Error("the policies file is empty: waiting for its content (unready); write {} to serve no policies", "error", first)
	hup := make(chan os.Signal, 1) // the probe port is reachable: a SIGHUP must not end the process
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-sctx.Done():
			return nil, fmt.Errorf("interrupted while waiting for the policies: %w", first)
		case <-t.C:
		case <-hup:
		}
		cfg, err := config.Load(*o, nil)
		if err == nil || !errors.Is(err, config.ErrEmpty) {
			return cfg, err
		}
		last.Store(&err)
	}
}

// shutdownBounded shuts srv down within timeout: it drains in-flight requests
// until then and abandons loads still running (a compilation cannot be
// interrupted; the process exit ends it).
func shutdownBounded(srv *server.Server, timeout time.Duration) error {
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return srv.Shutdown(sctx)
}

func policyIDs(cfg *config.Config) string {
	ids := make([]string, 0, len(cfg.Policies))
	for _, p := range cfg.Policies {
		ids = append(ids, p.ID)
	}
	return strings.Join(ids, ",")
}
