package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// Outcome is a result's verdict, as the report CRDs spell it.
type Outcome string

const (
	Pass  Outcome = "pass"
	Fail  Outcome = "fail"
	Error Outcome = "error"
	Skip  Outcome = "skip"
)

// Report kinds: which report API Run writes.
const (
	// ReportOpenReports writes openreports.io/v1alpha1 Report and ClusterReport (the default,
	// as in Kubewarden since 1.33).
	ReportOpenReports = "openreports"
	// ReportPolicyReport writes the legacy wgpolicyk8s.io/v1beta1 PolicyReport and
	// ClusterPolicyReport.
	ReportPolicyReport = "policyreport"
)

// Verdict is what an Evaluator says about one object.
type Verdict struct {
	Outcome Outcome // Pass, Fail or Error
	Message string  // the policy's message (Fail) or the reason (Error)
}

// Evaluator judges one synthetic AdmissionReview (JSON, apiVersion admission.k8s.io/v1) for one
// policy. It must be safe for concurrent use and must never return Skip: an evaluation that
// cannot happen is an Error with the reason.
type Evaluator interface {
	Evaluate(ctx context.Context, p *Policy, review []byte) Verdict
}

// Policy is a policy resource as the audit sees it.
type Policy struct {
	// ID is the policy's unique name: its id in policies.yml and its /audit/<id> path
	// (clusterwide-NAME, namespaced-NS-NAME, clusterwide-group-NAME, namespaced-group-NS-NAME).
	ID string
	// Object is the resource.
	Object v1.Policy
	// Server is the PolicyServer that serves it.
	Server string

	severity, category string
	rules              []target
	webhook            *webhook // nil: none registered (or explicit policies)
}

// ObjectRef names an audited object.
type ObjectRef struct {
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return fmt.Sprintf("%s %s", o.Kind, o.Name)
	}
	return fmt.Sprintf("%s %s/%s", o.Kind, o.Namespace, o.Name)
}

// Result is one policy's verdict on one object.
type Result struct {
	Policy   string    `json:"policy"` // Policy.ID
	Object   ObjectRef `json:"object"`
	Outcome  Outcome   `json:"result"`
	Message  string    `json:"message,omitempty"`
	Severity string    `json:"severity,omitempty"`
	Category string    `json:"category,omitempty"`
	Time     time.Time `json:"timestamp"`
}

// PolicyNote says why a policy was skipped or errored as a whole, or warns about it.
type PolicyNote struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// Summary is what a run did.
type Summary struct {
	RunID    string        `json:"runID"`
	Duration time.Duration `json:"duration"`
	// Audited are the policies that took part; Skipped and Errored those that did not, with the
	// reason; Warnings are policies whose verdicts may not mean what they mean at admission.
	Audited  []string     `json:"audited"`
	Skipped  []PolicyNote `json:"skipped,omitempty"`
	Errored  []PolicyNote `json:"errored,omitempty"`
	Warnings []PolicyNote `json:"warnings,omitempty"`
	// Namespaces scanned, objects listed and evaluated (matched by at least one policy).
	Namespaces int `json:"namespaces"`
	Listed     int `json:"listed"`
	Evaluated  int `json:"evaluated"`
	// Counts per outcome, and per policy (Policy.ID) and outcome.
	Pass, Fail, Error int
	ByPolicy          map[string]*Counts `json:"byPolicy,omitempty"`
	// End is when the pass ended.
	End time.Time `json:"end"`
	// Reports created, updated, deleted and left alone (unchanged). Replaced counts the updates
	// that wrote over a report the audit did not write, at the name of an audited object's
	// report (a tenant's pre-created report, say): never trusted, never left in place.
	Created, Updated, Deleted, Unchanged int
	Replaced                             int
	// Failures are the run's own failures (a list or a report write that failed): Run returns an
	// error when there is any.
	Failures []string `json:"failures,omitempty"`
}

// Counts are one policy's results in a pass.
type Counts struct {
	Pass  int `json:"pass"`
	Fail  int `json:"fail"`
	Error int `json:"error"`
}

// Options configure Run.
type Options struct {
	// Namespace is tollgate's namespace: its policy servers' Services and never audited.
	Namespace string
	// OnlyNamespace audits that namespace only; ClusterOnly cluster-scoped objects only.
	OnlyNamespace string
	ClusterOnly   bool
	// IgnoreNamespaces are not audited.
	IgnoreNamespaces []string
	// PageSize is the List limit (default 100).
	PageSize int64
	// QPS and Burst are the client's request rate to the apiserver (defaults 500 and 1000):
	// client-go's 5 and 10 would make 10,000 report writes take half an hour. The apiserver's
	// priority and fairness still protects it (a 429 is retried).
	QPS   float32
	Burst int
	// ParallelNamespaces, ParallelResources and ParallelPolicies bound the concurrency:
	// namespaces at once, objects at once per namespace, policies at once per object (defaults
	// 1, 100, 5, Kubewarden's).
	ParallelNamespaces, ParallelResources, ParallelPolicies int
	// ReportKind is ReportOpenReports (default) or ReportPolicyReport; NoReports writes none.
	ReportKind string
	NoReports  bool
	// Policies, when set, are audited instead of the cluster's policies, whatever their
	// backgroundAudit and status (for authors: tollgate audit --policy).
	Policies []*Policy
	// Evaluator judges; nil means the policy servers (ServerOptions).
	Evaluator Evaluator
	Server    ServerOptions
	// OnResult, if set, sees every result as it comes (from several goroutines at once).
	OnResult func(Result)
	Logger   *slog.Logger
	// NoStatus writes no status.audit summary on the policies (always so with Policies).
	NoStatus bool
	// Now is the clock (tests).
	Now func() time.Time
	// Tracer, when set, traces the run: a span for the run, one per scope (the cluster-scoped
	// objects, or one namespace: a batch of objects), and the policy servers' spans of each
	// evaluation under them (the trace context goes with each /audit request). Nil: no tracing.
	Tracer trace.Tracer
}

func (o *Options) defaults() {
	if o.PageSize <= 0 {
		o.PageSize = 100
	}
	if o.QPS <= 0 {
		o.QPS = 500
	}
	if o.Burst <= 0 {
		o.Burst = 1000
	}
	if o.ParallelNamespaces <= 0 {
		o.ParallelNamespaces = 1
	}
	if o.ParallelResources <= 0 {
		o.ParallelResources = 100
	}
	if o.ParallelPolicies <= 0 {
		o.ParallelPolicies = 5
	}
	if o.ReportKind == "" {
		o.ReportKind = ReportOpenReports
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}
