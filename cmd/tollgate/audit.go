package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/crds/audit"
	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

type auditFlags struct {
	o           audit.Options
	kubeconfig  string
	kubeContext string
	extraCAs    []string
	clientCert  string
	clientKey   string
	policyFile  string
	compare     bool
	output      string
	watch       bool
	metricsAddr string
	logLevel    string
	logFmt      string
	rt          runtimeFlags
}

func newAuditCmd() *cobra.Command {
	f := &auditFlags{}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check the objects already in the cluster against its policies and write policy reports",
		Long: `audit sends every existing object that an active policy with backgroundAudit
matches through that policy, as Kubewarden's audit scanner does: it lists the objects of
the policy's rules page by page, builds a CREATE AdmissionReview for each, posts it to
/audit/<policy> of the policy's PolicyServer over HTTPS (verified against the caBundle of
the policy's webhook configuration) and writes one OpenReports Report per audited object
in its namespace (ClusterReport for cluster-scoped objects), updated in place; reports of
objects that are gone or no longer matched are deleted. --report-kind policyreport writes
the legacy wgpolicyk8s.io PolicyReport/ClusterPolicyReport instead.

Skipped as by Kubewarden: rules with "*" in apiGroups, apiVersions or resources, rules
without the CREATE operation, policies with backgroundAudit: false or not active.
A policy that mentions userInfo gets a warning: audit requests have no user.

With --policy FILE.yaml (a ClusterAdmissionPolicy or AdmissionPolicy manifest) the
policy's module runs here, against the cluster's objects its rules match, and the results
are printed (-o table, json or yaml); no report is written and no policy server is needed.
With --compare too, the policy of the same kind and name in the cluster (its spec.module and
spec.settings, run here as well) judges every object beside the candidate, and only the
objects whose verdict or patch would change are printed: before the candidate sees any
live traffic, even as a shadow.

Exit status: 0 when the audit ran (whatever the policies said: an object a policy could
not evaluate, or a policy server that is down, is an "error" result); 1 when the audit
itself failed (bad flags, the cluster unreachable, a list or a report write refused).`,
		Example: `  tollgate audit --tollgate-namespace tollgate                 # in the cluster (the chart's CronJob)
  tollgate audit --kubeconfig ~/.kube/config -n shop --disable-store -o json
  tollgate audit --policy my-policy.yaml --kubeconfig ~/.kube/config
  tollgate audit --policy my-policy-v2.yaml --compare -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The audit's live heap is small (a page of objects and a namespace's results at a
			// time) but it allocates fast: collect more often to keep its RSS down
			// (docs/benchmarks.md "Audit"), unless GOGC or GOMEMLIMIT say otherwise.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(50)
			}
			if os.Getenv("GOMEMLIMIT") == "" {
				debug.SetMemoryLimit(80 << 20)
			}
			return runAudit(cmd, f)
		},
	}
	fs := cmd.Flags()
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "tollgate"
	}
	fs.StringVarP(&f.o.Namespace, "tollgate-namespace", "k", ns, "tollgate's namespace: its policy servers' Services; never audited (default $POD_NAMESPACE, else tollgate)")
	fs.StringVarP(&f.o.OnlyNamespace, "namespace", "n", "", "audit only this namespace")
	fs.BoolVarP(&f.o.ClusterOnly, "cluster", "c", false, "audit only cluster-scoped objects")
	fs.StringSliceVarP(&f.o.IgnoreNamespaces, "ignore-namespaces", "i", nil, "namespaces not to audit (repeatable, or a comma list)")
	fs.StringVarP(&f.o.Server.URL, "policy-server-url", "u", "", "send every request to this base URL instead of the policy servers' Services (certificates are still verified for the Service's name)")
	fs.BoolVar(&f.o.Server.ServiceIP, "service-ip", false, "dial the policy servers' ClusterIPs instead of their DNS names (a run outside the cluster that reaches the Service network)")
	fs.StringSliceVarP(&f.extraCAs, "extra-ca", "f", nil, "PEM file of a CA to trust besides the caBundle of the policies' webhook configurations")
	fs.StringVar(&f.clientCert, "client-cert", "", "client certificate (PEM) for policy servers that require mTLS")
	fs.StringVar(&f.clientKey, "client-key", "", "key of --client-cert (PEM)")
	fs.DurationVar(&f.o.Server.Timeout, "request-timeout", 10*time.Second, "deadline of one request to a policy server")
	fs.IntVar(&f.o.ParallelNamespaces, "parallel-namespaces", 1, "namespaces audited at once")
	fs.IntVar(&f.o.ParallelResources, "parallel-resources", 100, "objects audited at once per namespace")
	fs.IntVar(&f.o.ParallelPolicies, "parallel-policies", 5, "policies evaluated at once per object")
	fs.Int64Var(&f.o.PageSize, "page-size", 100, "objects per List page")
	fs.Float32Var(&f.o.QPS, "kube-api-qps", 500, "requests per second to the apiserver (client-side limit; the apiserver's priority and fairness applies too)")
	fs.IntVar(&f.o.Burst, "kube-api-burst", 1000, "burst of requests to the apiserver")
	fs.StringVar(&f.o.ReportKind, "report-kind", audit.ReportOpenReports, "openreports (openreports.io Report/ClusterReport) or policyreport (legacy wgpolicyk8s.io PolicyReport/ClusterPolicyReport)")
	fs.BoolVar(&f.o.NoReports, "disable-store", false, "write no reports (print the results with -o)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster configuration, then the usual kubeconfig rules, when empty)")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	fs.StringVar(&f.policyFile, "policy", "", "audit with this policy manifest (ClusterAdmissionPolicy or AdmissionPolicy YAML), its module run here; prints the results, writes no report")
	fs.BoolVar(&f.compare, "compare", false, "with --policy: also run the policy of the same kind and name in the cluster (its module and settings) on every object, and print only the objects whose verdict or patch would change with the candidate")
	fs.BoolVar(&f.watch, "watch", false, "incremental mode: after the full pass, keep watching the audited kinds and the policies; changed objects are audited at once, a policy change starts a new full pass (until SIGINT or SIGTERM)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "with --watch: serve Prometheus metrics (tollgate_audit_results{policy,result}, pass durations) on GET /metrics at this address, e.g. :9090 (default: none)")
	fs.BoolVar(&f.o.NoStatus, "disable-status", false, "do not write status.audit (violations, errors, last audit time) on the audited policies")
	fs.StringVarP(&f.output, "output", "o", "", "print every result: table, json or yaml (default with --policy: table; else only the summary)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFmt, "log-fmt", "text", "text or json")
	fs.StringVar(&f.rt.cacheDir, "cache-dir", "", "with --policy: compilation cache directory")
	fs.BoolVar(&f.rt.noCache, "no-cache", false, "with --policy: do not use the on-disk compilation cache")
	fs.DurationVar(&f.rt.timeout, "timeout", policy.DefaultTimeout, "with --policy: evaluation deadline")
	cmd.MarkFlagsRequiredTogether("client-cert", "client-key")
	return cmd
}

func (f *auditFlags) logger(w io.Writer) (*slog.Logger, error) {
	return newLogger(w, f.logLevel, f.logFmt)
}

func runAudit(cmd *cobra.Command, f *auditFlags) error {
	ctx := cmd.Context()
	if f.output == "" && f.policyFile != "" {
		f.output = "table"
	}
	if err := checkFormat(f.output, "", "table", "json", "yaml"); err != nil {
		return err
	}
	if f.o.ReportKind != audit.ReportOpenReports && f.o.ReportKind != audit.ReportPolicyReport {
		return fmt.Errorf("--report-kind: %q: want %s or %s", f.o.ReportKind, audit.ReportOpenReports, audit.ReportPolicyReport)
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"--parallel-namespaces", f.o.ParallelNamespaces}, {"--parallel-resources", f.o.ParallelResources}, {"--parallel-policies", f.o.ParallelPolicies}, {"--page-size", int(f.o.PageSize)}} {
		if p.v < 1 {
			return fmt.Errorf("%s: %d: want 1 or more", p.name, p.v)
		}
	}
	if f.o.ClusterOnly && f.o.OnlyNamespace != "" {
		return errors.New("--cluster and --namespace exclude each other: cluster-scoped objects have no namespace")
	}
	if f.metricsAddr != "" && !f.watch {
		return errors.New("--metrics-addr needs --watch: a one-shot run ends before it could be scraped (its summary is printed)")
	}
	log, err := f.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	f.o.Logger = log
	// OTEL_*: a span per pass and per scope, and the policy servers' spans under them
	tel, stopTelemetry, err := startTelemetry(ctx, log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	f.o.Tracer = tel.Tracer()
	for _, file := range f.extraCAs {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("--extra-ca: %w", err)
		}
		f.o.Server.ExtraCAs = append(f.o.Server.ExtraCAs, b)
	}
	if f.clientCert != "" {
		c, err := tls.LoadX509KeyPair(f.clientCert, f.clientKey)
		if err != nil {
			return fmt.Errorf("--client-cert/--client-key: %w", err)
		}
		f.o.Server.ClientCert = &c
	}
	cfg, err := kubeclient.Config(f.kubeconfig, f.kubeContext)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if f.compare && f.policyFile == "" {
		return errors.New("--compare needs --policy: the candidate is compared with the policy of its kind and name in the cluster")
	}
	var cmp *compareEvaluator
	if f.policyFile != "" {
		f.o.NoReports = true
		p, ev, err := localPolicy(ctx, f.policyFile, &f.rt, log)
		if err != nil {
			return err
		}
		defer ev.close(ctx)
		f.o.Policies = []*audit.Policy{p}
		f.o.Evaluator = ev
		if f.compare {
			active, err := activePolicy(ctx, cfg, p, &f.rt, log)
			if err != nil {
				return err
			}
			defer active.close(ctx)
			cmp = &compareEvaluator{candidate: ev, active: active}
			f.o.Evaluator = cmp
		}
	}
	if f.watch {
		if f.policyFile != "" || f.output != "" || f.o.NoReports {
			return errors.New("--watch keeps reports fresh: it takes neither --policy, -o nor --disable-store")
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		var m *audit.Metrics
		if f.metricsAddr != "" {
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			m = audit.NewMetrics(reg)
			_, stopMetrics, err := serveAuditMetrics(f.metricsAddr, reg, log)
			if err != nil {
				return err
			}
			defer stopMetrics()
		}
		return audit.Watch(ctx, cfg, f.o, func(s *audit.Summary, err error) {
			if m != nil {
				m.Observe(s, err)
			}
			fmt.Fprintln(cmd.ErrOrStderr(), summaryLine(s, true))
			if err != nil {
				log.Error("audit pass failed", "error", err)
			}
		})
	}
	if cmp != nil {
		s, runErr := audit.Run(ctx, cfg, f.o)
		if err := cmp.print(cmd.OutOrStdout(), f.output); err != nil {
			return err
		}
		fmt.Fprintln(cmd.ErrOrStderr(), summaryLine(s, false)+fmt.Sprintf("; %d object(s) would change", len(cmp.changes)))
		return runErr
	}
	var mu sync.Mutex
	var results []audit.Result
	if f.output != "" {
		f.o.OnResult = func(r audit.Result) {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}
	}
	s, runErr := audit.Run(ctx, cfg, f.o)
	if f.output != "" {
		sort.Slice(results, func(i, j int) bool {
			a, b := results[i], results[j]
			if a.Object.Namespace != b.Object.Namespace {
				return a.Object.Namespace < b.Object.Namespace
			}
			if a.Object.Kind != b.Object.Kind {
				return a.Object.Kind < b.Object.Kind
			}
			if a.Object.Name != b.Object.Name {
				return a.Object.Name < b.Object.Name
			}
			return a.Policy < b.Policy
		})
		if err := printAuditResults(cmd.OutOrStdout(), f.output, s, results); err != nil {
			return err
		}
	}
	fmt.Fprintln(cmd.ErrOrStderr(), summaryLine(s, !f.o.NoReports))
	if runErr != nil {
		cmd.SilenceUsage = true
		return runErr
	}
	return nil
}

// serveAuditMetrics serves reg on GET /metrics at addr (plain HTTP, as the policy server's
// readiness port) until the returned func is called; it returns the address it listens on.
func serveAuditMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func summaryLine(s *audit.Summary, reports bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tollgate audit: %d policies audited, %d skipped, %d errored; %d namespaces, %d objects listed, %d evaluated: %d pass, %d fail, %d error",
		len(s.Audited), len(s.Skipped), len(s.Errored), s.Namespaces, s.Listed, s.Evaluated, s.Pass, s.Fail, s.Error)
	if reports {
		fmt.Fprintf(&b, "; reports %d created, %d updated, %d deleted, %d unchanged", s.Created, s.Updated, s.Deleted, s.Unchanged)
		if s.Replaced > 0 {
			fmt.Fprintf(&b, " (%d updated over a report the audit did not write)", s.Replaced)
		}
	}
	fmt.Fprintf(&b, "; %s", s.Duration.Round(time.Millisecond))
	if len(s.Failures) > 0 {
		fmt.Fprintf(&b, "; FAILED: %d of its own steps failed", len(s.Failures))
	}
	return b.String()
}

func printAuditResults(w io.Writer, format string, s *audit.Summary, results []audit.Result) error {
	if format != "table" {
		if results == nil {
			results = []audit.Result{}
		}
		return printData(w, format, struct {
			Summary *audit.Summary `json:"summary"`
			Results []audit.Result `json:"results"`
		}{s, results})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tKIND\tNAME\tPOLICY\tRESULT\tMESSAGE")
	for _, r := range results {
		ns := r.Object.Namespace
		if ns == "" {
			ns = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ns, r.Object.Kind, r.Object.Name, r.Policy, r.Outcome, strings.ReplaceAll(r.Message, "\n", " "))
	}
	for _, n := range s.Skipped {
		fmt.Fprintf(tw, "-\t-\t-\t%s\tskip\t%s\n", n.Policy, n.Reason)
	}
	for _, n := range s.Errored {
		fmt.Fprintf(tw, "-\t-\t-\t%s\terror\t%s\n", n.Policy, n.Reason)
	}
	return tw.Flush()
}

// localEvaluator runs one policy's module in this process, with /audit's semantics: the raw
// verdict (no monitor mode, no message override).
type localEvaluator struct {
	host *policy.Host
	p    *policy.Policy
}

func (e *localEvaluator) Evaluate(ctx context.Context, _ *audit.Policy, review []byte) audit.Verdict {
	req, err := admission.ParseReview(review)
	if err != nil {
		return audit.Verdict{Outcome: audit.Error, Message: err.Error()}
	}
	v, err := e.verdict(ctx, req)
	if err != nil {
		return audit.Verdict{Outcome: audit.Error, Message: err.Error()}
	}
	if v.Accepted {
		return audit.Verdict{Outcome: audit.Pass}
	}
	return audit.Verdict{Outcome: audit.Fail, Message: v.Message}
}

// verdict is the policy's whole answer to req (with its patch).
func (e *localEvaluator) verdict(ctx context.Context, req *admission.Request) (admission.Verdict, error) {
	res, err := e.p.Evaluate(ctx, req)
	if err != nil {
		return admission.Verdict{}, fmt.Errorf("evaluation failed: %w", err)
	}
	return res.Verdict(), nil
}

func (e *localEvaluator) close(ctx context.Context) {
	e.p.Close(ctx)
	_ = e.host.Close(ctx)
}

// localPolicy reads a policy manifest for `audit --policy` and loads its module.
func localPolicy(ctx context.Context, file string, rt *runtimeFlags, log *slog.Logger) (*audit.Policy, *localEvaluator, error) {
	m, ok, err := readPolicyManifest(file)
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("--policy %s: want a .yaml or .yml policy manifest", file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	var obj v1.Policy
	switch m.kind {
	case "ClusterAdmissionPolicy":
		var p v1.ClusterAdmissionPolicy
		err = yaml.Unmarshal(b, &p)
		obj = &p
	case "AdmissionPolicy":
		var p v1.AdmissionPolicy
		err = yaml.Unmarshal(b, &p)
		if err == nil && p.Namespace == "" {
			return nil, nil, fmt.Errorf("policy manifest %s: an AdmissionPolicy needs metadata.namespace (the namespace it audits)", file)
		}
		obj = &p
	}
	if err != nil {
		return nil, nil, fmt.Errorf("policy manifest %s: %w", file, err)
	}
	if len(obj.Webhook().Rules) == 0 {
		return nil, nil, fmt.Errorf("policy manifest %s: spec.rules is empty: nothing to audit", file)
	}
	ev, err := loadLocal(ctx, "policy manifest "+file, m.module, m.settings, rt, log)
	if err != nil {
		return nil, nil, err
	}
	return audit.NewPolicy(obj), ev, nil
}

// loadLocal fetches module and loads it with settings in a host of its own; errors start with
// what.
func loadLocal(ctx context.Context, what, module string, settings []byte, rt *runtimeFlags, log *slog.Logger) (*localEvaluator, error) {
	mod, err := newResolver().Resolve(ctx, module)
	if err != nil {
		return nil, fmt.Errorf("%s: spec.module: %w", what, err)
	}
	if _, err := metadata.Read(mod.Wasm); err != nil {
		return nil, fmt.Errorf("%s: spec.module: %w", what, err)
	}
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: rt.cacheDir, DisableCache: rt.noCache, Logger: log})
	if err != nil {
		return nil, err
	}
	if rt.timeout <= 0 {
		rt.timeout = policy.DefaultTimeout
	}
	p, err := h.Load(ctx, policy.Spec{ID: module, Module: mod.Wasm, Settings: settings, Timeout: rt.timeout, PoolSize: 4})
	if err != nil {
		_ = h.Close(ctx)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &localEvaluator{host: h, p: p}, nil
}
