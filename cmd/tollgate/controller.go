package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/crds/controller"
)

// controllerFlags are the flags of `tollgate controller`.
type controllerFlags struct {
	o              controller.Options
	logLevel       string
	logFmt         string
	alwaysAcceptNS bool
}

func newControllerCmd() *cobra.Command {
	f := &controllerFlags{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the Kubernetes operator: PolicyServers and policies (Kubewarden's CRDs) to policy servers and webhooks",
		Long: `controller reconciles the PolicyServers and the four policy kinds of
policies.tollgate.dev/v1. Per PolicyServer it keeps, in --namespace, a Deployment
running 'tollgate serve', its Service, ConfigMap (policies.yml, sources.yml),
certificate Secret, ServiceAccount and PodDisruptionBudget; per policy it keeps a
webhook configuration, registered once every replica serves the policy. Policy changes
reach the servers by hot reload: the pods are not restarted.

It keeps the CA that signs the servers' certificates in the Secret --ca-secret,
creating it when missing and renewing it before it expires.`,
		Example: `  tollgate controller --namespace tollgate --leader-elect
  tollgate controller --kubeconfig ~/.kube/config --context kind-dev --namespace tollgate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The controller's heap is small and its CPU mostly idle: collect more often to keep
			// its memory down (docs/benchmarks.md, "Operator"), unless GOGC says otherwise.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(50)
			}
			return runController(cmd, f)
		},
	}
	f.addFlags(cmd.Flags())
	return cmd
}

func (f *controllerFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the controller's namespace: policy servers, the CA Secret and the leader election Lease live there (default $POD_NAMESPACE)")
	fs.StringVar(&f.o.Kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster configuration, then the usual kubeconfig rules, when empty)")
	fs.StringVar(&f.o.Context, "context", "", "kubeconfig context")
	fs.BoolVar(&f.o.LeaderElect, "leader-elect", false, "elect a leader so that several replicas can run (one reconciles)")
	fs.StringVar(&f.o.LeaderElectionID, "leader-election-id", "tollgate-controller", "name of the leader election Lease")
	fs.StringVar(&f.o.MetricsAddr, "metrics-bind-address", ":8088", `listen address of /metrics ("0" turns it off)`)
	fs.StringVar(&f.o.ProbeAddr, "health-probe-bind-address", ":8089", `listen address of /healthz and /readyz ("0" turns them off)`)
	fs.StringVar(&f.o.CASecret, "ca-secret", "tollgate-ca", "Secret in --namespace with the CA that signs policy server certificates (created when missing)")
	fs.DurationVar(&f.o.CAValidity, "ca-validity", 10*365*24*time.Hour, "lifetime of a new CA")
	fs.DurationVar(&f.o.CertValidity, "cert-validity", 365*24*time.Hour, "lifetime of a new policy server certificate")
	fs.DurationVar(&f.o.RenewBefore, "cert-renew-before", 60*24*time.Hour, "replace the CA or a certificate this long before it expires")
	fs.DurationVar(&f.o.CAPropagationDelay, "ca-propagation-delay", 2*time.Minute, "how long a renewed CA is only trusted (in every webhook's caBundle) before it signs certificates")
	fs.DurationVar(&f.o.CertCheckInterval, "cert-check-interval", time.Hour, "how often certificates are checked for expiry")
	fs.BoolVar(&f.alwaysAcceptNS, "always-accept-admission-reviews-on-deployments-namespace", true, "policy servers accept every request in --namespace without evaluation, so a broken policy cannot lock tollgate out of its own namespace")
	fs.StringSliceVar(&f.o.SkipNamespaces, "skip-namespaces", slices.Clone(controller.DefaultSkipNamespaces), "namespaces every cluster-wide policy leaves out (besides --namespace) unless it names them in spec.includeSkippedNamespaces; empty skips none")
	fs.DurationVar(&f.o.StatusPollInterval, "status-poll-interval", 500*time.Millisecond, "how often a pending policy's servers are asked (GET /policies) whether they serve it")
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&f.logFmt, "log-fmt", "text", "text or json")
}

// options checks the flags and returns the controller's options; every error names the flag
// and its value.
func (f *controllerFlags) options(stderr io.Writer) (controller.Options, error) {
	o := f.o
	o.AlwaysAcceptAdmissionReviewsOnNamespace = f.alwaysAcceptNS
	if o.Namespace == "" {
		return o, fmt.Errorf(`--namespace="": required (or set POD_NAMESPACE)`)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"ca-validity", o.CAValidity}, {"cert-validity", o.CertValidity}, {"cert-renew-before", o.RenewBefore},
		{"ca-propagation-delay", o.CAPropagationDelay}, {"cert-check-interval", o.CertCheckInterval}, {"status-poll-interval", o.StatusPollInterval}} {
		if d.v <= 0 {
			return o, fmt.Errorf("--%s=%s: must be positive", d.flag, d.v)
		}
	}
	logger, err := newLogger(stderr, f.logLevel, f.logFmt)
	if err != nil {
		return o, err
	}
	o.Logger = logger
	return o, nil
}

func runController(cmd *cobra.Command, f *controllerFlags) error {
	o, err := f.options(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// OTEL_*: a span per reconcile
	tel, stopTelemetry, err := startTelemetry(ctx, o.Logger)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	o.Tracer = tel.Tracer()
	return controller.Run(ctx, o)
}
