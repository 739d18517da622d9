package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/redact"
)

func newServeCmd() *cobra.Command {
	o := config.Defaults()
	var sendDemo, demoExit bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve policies as an HTTPS admission webhook (Kubewarden policy-server compatible)",
		Long: `serve runs the policies of a Kubewarden policies.yml as an admission webhook:
POST /validate/{id}, /validate_raw/{id} and /audit/{id} over HTTPS on --port, and
GET /readiness, /livez, /metrics and /policies over plain HTTP on --readiness-probe-port,
which answers from the start, while the policies load (/readiness 503 until they have).

Without --policies it serves the embedded example policies; without --cert-file it
generates a self-signed certificate and prints where its CA is. Every flag can also be
set as TOLLGATE_<FLAG> in the environment (--policy-timeout: TOLLGATE_POLICY_TIMEOUT)
or in the --config file; flags win over the environment, which wins over the file.

policies.yml is reloaded when it changes and on SIGHUP; SIGTERM drains in-flight
requests and exits.`,
		Example: `  tollgate serve --demo
  tollgate serve --policies policies.yml --cert-file tls.crt --key-file tls.key
  TOLLGATE_WORKERS=4 tollgate serve --policies policies.yml --insecure-http --port 8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if demoExit && !sendDemo {
				return errors.New("--demo-exit goes with --demo")
			}
			return runServe(cmd, &o, sendDemo, demoExit)
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&sendDemo, "demo", false, "once serving, send one sample request per example policy to the server and print the answers")
	cmd.Flags().BoolVar(&demoExit, "demo-exit", false, "with --demo: shut down (draining) after printing the answers")
	addCapabilityFlags(cmd)
	addConfigMapFlags(cmd)
	addVerificationFlags(cmd)
	return cmd
}

func runServe(cmd *cobra.Command, o *config.Options, sendDemo, demoExit bool) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	stderr := cmd.ErrOrStderr()

	// flags > environment > --config file > defaults
	cfgPath := o.ConfigPath
	if !cmd.Flags().Changed("config") {
		cfgPath = os.Getenv(config.EnvName("config"))
	}
	var cfgData []byte
	if cfgPath != "" {
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		cfgData = b
	}
	if err := config.ApplySources(cmd.Flags(), os.LookupEnv, cfgPath, cfgData); err != nil {
		return err
	}
	logger, err := newServeLogger(stderr, o)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*o, demo.Policies())
	if errors.Is(err, config.ErrEmpty) && o.PoliciesPath != "" {
		// Caught between an editor's truncation and its write: wait for the content, unready.
		cfg, err = awaitPolicies(ctx, o, err, logger)
	}
	if err != nil {
		return err
	}
	if cfg.Embedded {
		logger.Info("no --policies given: serving the embedded example policies", "policies", policyIDs(cfg))
	}

	logsDropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_policy_log_lines_dropped_total",
		Help: "Log lines of a policy dropped because it logged above its rate limit."}, []string{"policy"})
	host, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: o.CacheDir, Logger: logger,
		GuestLogDropped:       func(id string) { logsDropped.WithLabelValues(id).Inc() },
		InstanceRecycleGrowth: recycleGrowth(o.InstanceRecycleGrowth),
		Limits: wasm.Limits{ModuleBytes: uint64(o.MaxModuleBytes), BodyBytes: uint32(o.MaxFunctionBodyBytes),
			Locals: uint32(o.MaxFunctionLocals), Nesting: uint32(o.MaxNestingDepth)},
		CompileTimeout: o.CompileTimeout, CompileMemoryBytes: uint64(o.CompileMemoryLimit),
		MemoryBudgetBytes: uint64(o.PoliciesMemoryBudget)})
	if err != nil {
		return err
	}
	defer func() {
		// Bounded: a load abandoned at its deadline may still hold the runtime.
		done := make(chan struct{})
		go func() { host.Close(context.Background()); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			logger.Warn("the Wasm runtime did not close within 5s (a load still running); exiting")
		}
	}()
	sources, err := oci.NewSources(o.SourcesPath, cfg.Sources, "")
	if err != nil {
		return fmt.Errorf("--sources-path: %w", err)
	}
	resolver := serveResolver(cfg.Sources, sources)
	resolver.Registry = serveRegistry(o, sources, logger)
	ver, err := withVerification(cmd, resolver.Registry, logger)
	if err != nil {
		return err
	}
	if ver != nil {
		resolver.Registry = ver
	}
	loader := &server.HostLoader{Host: host, Resolver: withVerifiedModules(resolveWith(resolver, cfg.Sources), ver != nil), ShareInstances: shareInstances}

	var tlsCfg *tls.Config
	var certs *server.CertReloader
	caFile := o.ClientCAFile
	serverCA := ""
	if !o.InsecureHTTP {
		certFile, keyFile := o.CertFile, o.KeyFile
		if certFile == "" {
			dir := o.StateDir
			if dir == "" {
				base, err := os.UserConfigDir()
				if err != nil {
					return fmt.Errorf("no --cert-file and no --state-dir for a generated certificate: %w", err)
				}
				dir = filepath.Join(base, "tollgate", "serve-tls")
			}
			var names []string
			if ip := net.ParseIP(o.Addr); ip == nil || !ip.IsUnspecified() {
				names = append(names, o.Addr)
			}
			if hn, err := os.Hostname(); err == nil {
				names = append(names, hn)
			}
			ss, err := server.EnsureSelfSigned(dir, names...)
			if err != nil {
				return err
			}
			certFile, keyFile, serverCA = ss.CertFile, ss.KeyFile, ss.CAFile
			verb := "reusing"
			if ss.Generated {
				verb = "generated"
			}
			fmt.Fprintf(stderr, "tollgate: no --cert-file: %s a self-signed certificate; clients must trust its CA:\n  %s\n", verb, ss.CAFile)
		}
		certs, err = server.NewCertReloader(certFile, keyFile, caFile, logger, nil)
		if err != nil {
			return err
		}
		certs.Watch(ctx, 10*time.Second)
		defer certs.Close()
		tlsCfg = certs.TLSConfig()
	}

	opts := *o
	reread := func() (*config.Config, []byte, error) {
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
	so := server.Options{Config: cfg, Loader: loader, Logger: logger, TLS: tlsCfg, Certs: certs, Reread: reread,
		Metrics: []prometheus.Collector{logsDropped}}
	closeCapabilities, err := withCapabilities(cmd, loader, &so, cfg, resolver, logger)
	if err != nil {
		return err
	}
	defer closeCapabilities()
	if o.Watch && !cfg.Embedded {
		so.WatchFiles = []string{o.PoliciesPath}
	}
	if err := withPoliciesConfigMap(cmd, &so, opts, cfg.Sources, logger); err != nil {
		return err
	}
	// signals are caught before the server is reachable: a SIGHUP must never
	// meet the default action (exit)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	srv, err := server.Open(so)
	if err != nil {
		return err
	}
	// The probe port answers before the policies load (a cold compilation
	// takes tens of seconds): /livez 200, /readiness 503 until Start.
	if err := srv.ServeProbes(); err != nil {
		return err
	}
	// Each policy serves as soon as its own load ended (a slow or stuck one
	// holds back nothing but itself, up to --policy-load-timeout); with
	// --strict every policy must load before the webhook port opens.
	if err := srv.Begin(ctx); err != nil {
		srv.Shutdown(context.Background())
		return err
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
			return errors.New("interrupted while loading the policies")
		}
		if err != nil {
			shutdownBounded(srv, o.ShutdownTimeout)
			return err
		}
	}
	if err := srv.Start(ctx); err != nil {
		shutdownBounded(srv, o.ShutdownTimeout)
		return err
	}

	if ver != nil {
		go ver.watch(ctx, srv)
	}
	if sendDemo {
		_ = srv.WaitLoaded(ctx) // the sample requests go to loaded policies
		err := runDemo(cmd.OutOrStdout(), srv.Addr(), o.InsecureHTTP, serverCA, demoExit)
		if err != nil {
			logger.Error("demo requests failed", "error", err)
		}
		if demoExit {
			sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
			defer cancel()
			return errors.Join(err, srv.Shutdown(sctx))
		}
	}

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

func newServeLogger(w io.Writer, o *config.Options) (*slog.Logger, error) {
	lvl, err := config.ParseLogLevel(o.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level=%s: %w", o.LogLevel, err)
	}
	ho := &slog.HandlerOptions{Level: lvl}
	if o.LogFmt == "json" {
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	}
	return slog.New(slog.NewTextHandler(w, ho)), nil
}

func policyIDs(cfg *config.Config) string {
	ids := make([]string, 0, len(cfg.Policies))
	for _, p := range cfg.Policies {
		ids = append(ids, p.ID)
	}
	return strings.Join(ids, ",")
}

// serveResolver is the command's module resolver with the embedded example
// modules under builtin://examples/ and sources.yml applied to http(s)://
// (compiled: its certificates read).
func serveResolver(src config.Sources, compiled *oci.Sources) *module.Resolver {
	r := newResolver()
	prev, prevDigest := r.Builtin, r.BuiltinDigest
	r.Builtin = func(name string) ([]byte, error) {
		if strings.HasPrefix(name, demo.Prefix) {
			return demo.Module(name)
		}
		if prev != nil {
			return prev(name)
		}
		return nil, fmt.Errorf("no built-in module %q", name)
	}
	r.BuiltinDigest = func(name string) (string, error) {
		if strings.HasPrefix(name, demo.Prefix) || prevDigest == nil {
			return "", nil // hashed by the loader
		}
		return prevDigest(name)
	}
	if len(src.InsecureSources) == 0 && len(src.SourceAuthorities) == 0 {
		return r
	}
	insecure := map[string]bool{}
	for _, h := range src.InsecureSources {
		insecure[h] = true
	}
	roots := map[string]*x509.CertPool{}
	for host := range src.SourceAuthorities {
		roots[host] = compiled.CertPool(host)
	}
	lookup := func(hostport string) (bool, *x509.CertPool) {
		host, _, _ := net.SplitHostPort(hostport)
		for _, k := range []string{hostport, host} {
			if insecure[k] {
				return true, nil
			}
			if p := roots[k]; p != nil {
				return false, p
			}
		}
		return false, nil
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			skip, pool := lookup(addr)
			c := &tls.Config{ServerName: host, RootCAs: pool, InsecureSkipVerify: skip, MinVersion: tls.VersionTLS12}
			return tls.DialWithDialer(dialer, network, addr, c)
		},
	}
	r.HTTPClient = &http.Client{Timeout: 60 * time.Second, Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme == "http" {
				if skip, _ := lookup(req.URL.Host); !skip {
					return fmt.Errorf("redirect to plain http://%s, which is not an insecure source", req.URL.Host)
				}
			}
			return nil
		}}
	r.AllowHTTP = len(insecure) > 0
	return r
}

// resolveWith fetches a module, allowing plain http:// only for the insecure
// sources of sources.yml.
func resolveWith(r *module.Resolver, src config.Sources) serveModules {
	insecure := map[string]bool{}
	for _, h := range src.InsecureSources {
		insecure[h] = true
	}
	return serveModules{r: r, insecure: insecure}
}

// serveModules is serve's server.DigestResolver: the digest of a built-in
// module comes with it (host/builtin.Digest), so that a start or reload does
// not hash the module.
type serveModules struct {
	r        *module.Resolver
	insecure map[string]bool
}

func (s serveModules) Resolve(ctx context.Context, uri string) ([]byte, error) {
	b, _, err := s.ResolveDigest(ctx, uri)
	return b, err
}

func (s serveModules) ResolveDigest(ctx context.Context, uri string) ([]byte, string, error) {
	b, d, err := s.resolveDigest(ctx, uri)
	return b, d, redact.Error(err, uri) // module.Resolve's errors are masked already; these are not
}

func (s serveModules) resolveDigest(ctx context.Context, uri string) ([]byte, string, error) {
	if strings.HasPrefix(uri, "http://") {
		u, err := url.Parse(uri)
		if err != nil {
			return nil, "", err
		}
		if !s.insecure[u.Host] && !s.insecure[u.Hostname()] {
			return nil, "", fmt.Errorf("%w %q: plain http:// is allowed only for hosts listed in sources.yml insecure_sources", module.ErrFetch, uri)
		}
	}
	m, err := s.r.Resolve(ctx, uri)
	if err != nil {
		return nil, "", err
	}
	return m.Wasm, m.Digest, nil
}

// runDemo sends the sample requests to the server and prints the answers.
func runDemo(w io.Writer, addr string, plain bool, caFile string, exiting bool) error {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	base := "https://" + net.JoinHostPort(host, port)
	tr := &http.Transport{}
	if plain {
		base = "http://" + net.JoinHostPort(host, port)
	} else if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	} else {
		return errors.New("--demo needs the generated certificate (no --cert-file) or --insecure-http")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	u, _ := url.Parse(base)
	fmt.Fprintf(w, "\ntollgate serve --demo: one request per example policy to %s\n", u)
	for _, rq := range demo.Requests() {
		resp, err := client.Post(base+rq.Path, "application/json", strings.NewReader(rq.Body))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Response json.RawMessage `json:"response"`
		}
		json.Unmarshal(body, &out)
		fmt.Fprintf(w, "\n%s (%s, expect %s): HTTP %s\n  %s\n", rq.Path, rq.Title, rq.Expect, strconv.Itoa(resp.StatusCode), out.Response)
		var patch struct {
			Patch []byte `json:"patch"`
		}
		if json.Unmarshal(out.Response, &patch) == nil && len(patch.Patch) > 0 {
			fmt.Fprintf(w, "  patch, decoded: %s\n", patch.Patch)
		}
	}
	cacert := ""
	if !plain {
		cacert = " --cacert " + caFile
	}
	intro := "Try it yourself:"
	if exiting {
		// this server is about to stop: point at the one `tollgate serve` starts
		intro = "Try it yourself: run `tollgate serve`, then:"
		base = "https://127.0.0.1:3000"
		if plain {
			base = "http://127.0.0.1:3000"
		}
	}
	fmt.Fprintf(w, "\n%s\n  curl%s -H 'Content-Type: application/json' --data '%s' %s/validate_raw/raw-validation\n\n",
		intro, cacert, `{"request":{"user":"mallory","action":"get","resource":"secrets/db"}}`, base)
	return nil
}

// recycleGrowth is --instance-recycle-growth as policy.HostOptions wants it
// (0, never, is negative there; 0 there is the default).
func recycleGrowth(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}
