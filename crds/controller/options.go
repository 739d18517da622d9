package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"go.opentelemetry.io/otel/trace"
)

// Options configure the controller. The zero value of a field means its default.
type Options struct {
	// Namespace is the controller's own namespace: policy servers and the CA Secret live
	// there, and cluster-wide policies leave it out unless they ask for it.
	Namespace string
	// Kubeconfig and Context select the cluster (in-cluster configuration when empty).
	Kubeconfig, Context string
	// LeaderElect turns on leader election with the Lease LeaderElectionID in Namespace.
	LeaderElect      bool
	LeaderElectionID string
	// MetricsAddr and ProbeAddr are the listen addresses of /metrics and of /healthz and
	// /readyz ("0" turns one off).
	MetricsAddr, ProbeAddr string
	// CASecret names the Secret (in Namespace) with the CA that signs policy server
	// certificates; the controller creates it when missing.
	CASecret string
	// CAValidity and CertValidity are the lifetimes of a new CA and of a new server
	// certificate; RenewBefore is how long before expiry either is replaced.
	CAValidity, CertValidity, RenewBefore time.Duration
	// CAPropagationDelay is how long a new CA is only trusted (in every caBundle) before it
	// signs server certificates, so that no apiserver sees a certificate it does not trust yet.
	CAPropagationDelay time.Duration
	// CertCheckInterval is how often certificates are checked for expiry.
	CertCheckInterval time.Duration
	// AlwaysAcceptAdmissionReviewsOnNamespace makes policy servers accept every request in
	// Namespace without evaluation, so a broken policy cannot lock tollgate out of its own
	// namespace.
	AlwaysAcceptAdmissionReviewsOnNamespace bool
	// SkipNamespaces are left out of every cluster-wide policy's webhook, as Namespace is,
	// unless the policy names them in spec.includeSkippedNamespaces: a down or broken policy
	// server must not block what keeps the cluster running. nil means DefaultSkipNamespaces;
	// an empty non-nil list skips none.
	SkipNamespaces []string
	// StatusPollInterval is how often a pending policy's servers are asked whether they
	// serve it.
	StatusPollInterval time.Duration
	// Logger receives the controller's structured logs.
	Logger *slog.Logger
	// Tracer, when set, traces each reconcile (a span per reconcile: kind, namespace, name,
	// error, requeue). Nil: no tracing.
	Tracer trace.Tracer
}

// DefaultSkipNamespaces are the namespaces cluster-wide policies leave out by default: the
// control plane's add-ons and the nodes' heartbeat Leases.
var DefaultSkipNamespaces = []string{"kube-system", "kube-node-lease"}

// ErrOptions reports an invalid option.
var ErrOptions = errors.New("controller: invalid options")

// withDefaults returns o with every zero field set to its default, or an error naming the
// option at fault.
func (o Options) withDefaults() (Options, error) {
	if o.Namespace == "" {
		return o, fmt.Errorf("%w: namespace is empty (set --namespace or POD_NAMESPACE)", ErrOptions)
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "tollgate-controller"
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = ":8088"
	}
	if o.ProbeAddr == "" {
		o.ProbeAddr = ":8089"
	}
	if o.CASecret == "" {
		o.CASecret = "tollgate-ca"
	}
	if o.CAValidity == 0 {
		o.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if o.CertValidity == 0 {
		o.CertValidity = 365 * 24 * time.Hour
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = 60 * 24 * time.Hour
	}
	if o.CAPropagationDelay == 0 {
		o.CAPropagationDelay = 2 * time.Minute
	}
	if o.CertCheckInterval == 0 {
		o.CertCheckInterval = time.Hour
	}
	if o.StatusPollInterval == 0 {
		o.StatusPollInterval = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SkipNamespaces == nil {
		o.SkipNamespaces = DefaultSkipNamespaces
	}
	for _, ns := range o.SkipNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return o, fmt.Errorf("%w: skip-namespaces: %q is not a namespace name: %s", ErrOptions, ns, strings.Join(errs, "; "))
		}
	}
	if o.RenewBefore >= o.CertValidity {
		return o, fmt.Errorf("%w: cert-renew-before %s must be shorter than cert-validity %s", ErrOptions, o.RenewBefore, o.CertValidity)
	}
	if o.RenewBefore >= o.CAValidity {
		return o, fmt.Errorf("%w: cert-renew-before %s must be shorter than ca-validity %s", ErrOptions, o.RenewBefore, o.CAValidity)
	}
	return o, nil
}
