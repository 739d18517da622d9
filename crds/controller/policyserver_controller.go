package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/telemetry"
)

// Event reasons of the PolicyServer reconciler.
const (
	EventReasonConfigChanged      = "ConfigurationChanged"
	EventReasonPolicyLeftOut      = "PolicyLeftOut"
	EventReasonCertificateIssued  = "CertificateIssued"
	EventReasonReconcileFailed    = v1.ReasonReconciliationFailed
	EventReasonWaitingForWebhooks = "WaitingForWebhooks"
)

// webhookCleanupPoll is how often a deleted PolicyServer looks for its policies' webhooks.
const webhookCleanupPoll = 2 * time.Second

// PolicyServerReconciler keeps, for every PolicyServer, a ServiceAccount, a Secret with its
// certificate, a ConfigMap with policies.yml and sources.yml, a Role and RoleBinding that let
// the server read that ConfigMap, a Deployment, a Service and a PodDisruptionBudget (when
// asked) in the controller's namespace, all named
// PolicyServerObjectName and controlled by the PolicyServer (so that garbage collection
// removes them with it). It writes each by server-side apply (FieldOwner), and only when the
// fields it owns differ from what it wants (applyOwned).
type PolicyServerReconciler struct {
	Client   client.Client
	Options  Options
	Certs    *CertManager
	Recorder record.EventRecorder
	// APIReader reads the context-aware ClusterRole and ClusterRoleBinding uncached; nil
	// leaves them alone (see reconcileContextAwareRBAC).
	APIReader client.Reader
	// RESTMapper maps contextAwareResources kinds to resources; nil is the client's.
	RESTMapper meta.RESTMapper

	entries entryCache
}

// RBAC of the PolicyServer reconciler (package-level markers for controller-gen; Secrets,
// ConfigMaps, Services, ServiceAccounts, Deployments, PodDisruptionBudgets, Roles,
// RoleBindings and Leases are in the controller's namespace only; the Role it gives each
// policy server grants get, list and watch on one ConfigMap, which the controller holds, so
// creating and binding it needs no escalate or bind verb):
//
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=policyservers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=policyservers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=policyservers/finalizers,verbs=update
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=clusteradmissionpolicies;admissionpolicies;clusteradmissionpolicygroups;admissionpolicygroups,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// SetupWithManager registers the reconciler: it watches PolicyServers, the objects they own, the
// four policy kinds (a policy change rebuilds its server's ConfigMap at once), the CA Secret,
// image pull Secrets and the CertManager's periodic checks (which re-reconcile every
// PolicyServer).
func (r *PolicyServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("policyserver").
		For(&v1.PolicyServer{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&policyv1.PodDisruptionBudget{})
	for _, obj := range []client.Object{&v1.ClusterAdmissionPolicy{}, &v1.AdmissionPolicy{}, &v1.ClusterAdmissionPolicyGroup{}, &v1.AdmissionPolicyGroup{}} {
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(mapPolicyToServer))
	}
	b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.mapSecret),
		builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetNamespace() == r.Options.Namespace })))
	b = b.WatchesRawSource(source.Channel(r.Certs.recheck, handler.EnqueueRequestsFromMapFunc(r.allPolicyServers)))
	return b.Complete(traced(r, r.Options.Tracer, "PolicyServer"))
}

// mapPolicyToServer maps a policy to the PolicyServer that serves it.
func mapPolicyToServer(_ context.Context, obj client.Object) []reconcile.Request {
	p, ok := obj.(v1.Policy)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: boundServer(p)}}}
}

// boundServer is the name of the PolicyServer a policy is bound to (the CRD's default when
// the field is empty).
func boundServer(p v1.Policy) string {
	if s := p.Webhook().PolicyServer; s != "" {
		return s
	}
	return "default"
}

func (r *PolicyServerReconciler) allPolicyServers(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.policyServers(ctx, func(*v1.PolicyServer) bool { return true })
}

// mapSecret maps the CA Secret to every PolicyServer, and an image pull Secret to the
// PolicyServers that use it (so that a Secret created after its PolicyServer is seen at once).
func (r *PolicyServerReconciler) mapSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	if r.Certs.IsCASecret(obj) {
		return r.allPolicyServers(ctx, obj)
	}
	return r.policyServers(ctx, func(ps *v1.PolicyServer) bool { return ps.Spec.ImagePullSecret == obj.GetName() })
}

func (r *PolicyServerReconciler) policyServers(ctx context.Context, match func(*v1.PolicyServer) bool) []reconcile.Request {
	var list v1.PolicyServerList
	if err := r.Client.List(ctx, &list); err != nil {
		r.Options.Logger.Error("listing PolicyServers", "error", err)
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if match(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return reqs
}

// Reconcile brings one PolicyServer's objects to their desired state. A failure of one object
// does not stop the others: each sets its condition (and an Event), and the errors are
// returned together so that the request is retried with backoff.
func (r *PolicyServerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ps := &v1.PolicyServer{}
	if err := r.Client.Get(ctx, req.NamespacedName, ps); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ps.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, ps)
	}
	if !controllerutil.ContainsFinalizer(ps, v1.PolicyServerFinalizer) {
		patch := client.MergeFromWithOptions(ps.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(ps, v1.PolicyServerFinalizer)
		if err := r.Client.Patch(ctx, ps, patch); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	before := ps.Status.DeepCopy()
	var errs []error
	conflict := false
	step := func(cond string, err error, okMsg string) {
		if apierrors.IsConflict(err) {
			// A write raced with another, or the cache lags behind our last write: nothing
			// failed, the object is read again shortly (the condition stays as it was).
			conflict = true
			return
		}
		c := metav1.Condition{Type: cond, Status: metav1.ConditionTrue, Reason: v1.ReasonReconciliationSucceeded, Message: okMsg, ObservedGeneration: ps.Generation}
		if err != nil {
			errs = append(errs, err)
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1.ReasonReconciliationFailed, err.Error()
			r.Recorder.Eventf(ps, corev1.EventTypeWarning, EventReasonReconcileFailed, "%s: %v", cond, err)
		}
		meta.SetStatusCondition(&ps.Status.Conditions, c)
	}

	recheck, err := r.reconcileSecret(ctx, ps)
	step(v1.ConditionCertSecretReconciled, err, "")
	cfg, err := r.reconcileConfigMap(ctx, ps)
	step(v1.ConditionConfigMapReconciled, err, cfg.message())
	if err == nil {
		ps.Status.ConfigDigest, ps.Status.Policies = cfg.digest, int32(cfg.policies)
	}
	// Before the Deployment: its pods watch their ConfigMap from their start.
	rbacErr, rbacMsg := r.reconcileRBAC(ctx, ps), ""
	if rbacErr == nil && cfg.policiesYML != nil {
		rbacMsg, rbacErr = r.reconcileContextAwareRBAC(ctx, ps, cfg.policiesYML)
	}
	step(v1.ConditionRBACReconciled, rbacErr, rbacMsg)
	dep, err := r.reconcileDeployment(ctx, ps)
	step(v1.ConditionDeploymentReconciled, err, deploymentNotes(ps))
	if dep != nil {
		ps.Status.ReadyReplicas = dep.Status.ReadyReplicas
	}
	step(v1.ConditionServiceReconciled, r.reconcileService(ctx, ps), "")
	step(v1.ConditionPDBReconciled, r.reconcilePDB(ctx, ps), "")
	ps.Status.ObservedGeneration = ps.Generation

	if err := r.writeStatus(ctx, ps, before); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return reconcile.Result{}, errors.Join(errs...)
	}
	if conflict {
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if recheck <= 0 || recheck > r.Options.CertCheckInterval {
		recheck = r.Options.CertCheckInterval
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}

// deploymentNotes is the DeploymentReconciled condition's message when the Deployment was
// written: the fields that have no effect, and an OTEL_* variable of spec.env that tollgate serve
// refuses (its pods would not start; the old ones keep serving).
func deploymentNotes(ps *v1.PolicyServer) string {
	var notes []string
	for _, n := range []string{unsupportedFields(ps), telemetryEnvProblem(ps.Spec.Env)} {
		if n != "" {
			notes = append(notes, n)
		}
	}
	return strings.Join(notes, "; ")
}

// telemetryEnvProblem checks the OTEL_* variables of env with the values written in it as
// `tollgate serve` reads them (host/telemetry), and says what it would refuse, "" when nothing. A
// variable from a Secret or ConfigMap (valueFrom) is not known here and is left out; an error
// never shows a header's value.
func telemetryEnvProblem(env []corev1.EnvVar) string {
	vars := map[string]string{}
	for _, e := range env {
		if strings.HasPrefix(e.Name, "OTEL_") && e.ValueFrom == nil {
			vars[e.Name] = e.Value // a later entry wins, as in the container
		}
	}
	if len(vars) == 0 {
		return ""
	}
	if _, err := telemetry.FromEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		return "spec.env: the policy server will not start: " + err.Error()
	}
	return ""
}

// unsupportedFields names the spec fields that are accepted for compatibility with Kubewarden
// but have no effect, for the DeploymentReconciled condition's message.
func unsupportedFields(ps *v1.PolicyServer) string {
	var f []string
	if ps.Spec.SigstoreTrustConfig != "" && ps.Spec.VerificationConfig == "" {
		f = append(f, "spec.sigstoreTrustConfig (without spec.verificationConfig)")
	}
	if ps.Spec.MetricsPort != nil {
		f = append(f, "spec.metricsPort (metrics are served on readinessProbePort)")
	}
	if len(f) == 0 {
		return ""
	}
	return "accepted but not supported, ignored: " + strings.Join(f, ", ")
}

// writeStatus writes ps's status when it differs from before.
func (r *PolicyServerReconciler) writeStatus(ctx context.Context, ps *v1.PolicyServer, before *v1.PolicyServerStatus) error {
	if equality.Semantic.DeepEqual(&ps.Status, before) {
		return nil
	}
	orig := ps.DeepCopy()
	orig.Status = *before
	if err := r.Client.Status().Patch(ctx, ps, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("writing the status: %w", err)
	}
	return nil
}

// finalize waits until no webhook configuration of the PolicyServer's policies is left (the
// policy reconcilers remove them when they see the PolicyServer is being deleted), then
// removes the finalizer; garbage collection removes the owned objects.
func (r *PolicyServerReconciler) finalize(ctx context.Context, ps *v1.PolicyServer) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(ps, v1.PolicyServerFinalizer) {
		return reconcile.Result{}, nil
	}
	before := ps.Status.DeepCopy()
	sel := client.MatchingLabels{v1.PolicyServerLabel: ps.Name}
	var vw admv1.ValidatingWebhookConfigurationList
	var mw admv1.MutatingWebhookConfigurationList
	if err := r.Client.List(ctx, &vw, sel); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Client.List(ctx, &mw, sel); err != nil {
		return reconcile.Result{}, err
	}
	if n := len(vw.Items) + len(mw.Items); n > 0 {
		msg := fmt.Sprintf("waiting for %d webhook configuration(s) of this server's policies to be removed", n)
		meta.SetStatusCondition(&ps.Status.Conditions, metav1.Condition{Type: v1.ConditionPolicyWebhooksCleanedUp, Status: metav1.ConditionFalse,
			Reason: EventReasonWaitingForWebhooks, Message: msg, ObservedGeneration: ps.Generation})
		if err := r.writeStatus(ctx, ps, before); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: webhookCleanupPoll}, nil
	}
	meta.SetStatusCondition(&ps.Status.Conditions, metav1.Condition{Type: v1.ConditionPolicyWebhooksCleanedUp, Status: metav1.ConditionTrue,
		Reason: v1.ReasonReconciliationSucceeded, Message: "no webhook of this server's policies is left", ObservedGeneration: ps.Generation})
	if err := r.writeStatus(ctx, ps, before); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if r.APIReader != nil {
		// Cluster-scoped and owned by ps: garbage collection would remove them too.
		if err := r.deleteContextAwareRBAC(ctx, ContextAwareRoleName(ps.Name)); err != nil {
			return reconcile.Result{}, err
		}
	}
	patch := client.MergeFromWithOptions(ps.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ps, v1.PolicyServerFinalizer)
	if err := r.Client.Patch(ctx, ps, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}

// objectMeta returns the metadata of a PolicyServer's object named PolicyServerObjectName:
// spec.labels, then the controller's labels (which win).
func (r *PolicyServerReconciler) objectMeta(ps *v1.PolicyServer) metav1.ObjectMeta {
	labels := maps.Clone(ps.Spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1.PolicyServerLabel] = ps.Name
	labels[v1.LabelPartOf] = v1.PartOfLabelValue
	labels[v1.LabelComponent] = "policy-server"
	return metav1.ObjectMeta{Name: v1.PolicyServerObjectName(ps.Name), Namespace: r.Options.Namespace, Labels: labels}
}
