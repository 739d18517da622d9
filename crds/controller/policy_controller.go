package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=clusteradmissionpolicies;admissionpolicies;clusteradmissionpolicygroups;admissionpolicygroups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=clusteradmissionpolicies/status;admissionpolicies/status;clusteradmissionpolicygroups/status;admissionpolicygroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=clusteradmissionpolicies/finalizers;admissionpolicies/finalizers;clusteradmissionpolicygroups/finalizers;admissionpolicygroups/finalizers,verbs=update
// +kubebuilder:rbac:groups=policies.tollgate.dev,resources=policyservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch;create;update;patch;delete
// The controller's namespace only (charts/tollgate/templates/role.yaml): the servers'
// ConfigMaps, the CA Secret and the servers' EndpointSlices.
// +kubebuilder:rbac:groups="",resources=configmaps;secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch

// Reasons of the PolicyActive condition.
const (
	// ReasonPolicyActive: every replica serves the policy and its webhook is registered.
	ReasonPolicyActive = "PolicyActive"
	// ReasonPolicyServerNotFound: no PolicyServer of the policy's spec.policyServer.
	ReasonPolicyServerNotFound = "PolicyServerNotFound"
	// ReasonPolicyServerDeleting: the policy's PolicyServer is being deleted.
	ReasonPolicyServerDeleting = "PolicyServerDeleting"
	// ReasonInvalidPolicy: the policy cannot be written in policies.yml (the message says why).
	ReasonInvalidPolicy = "InvalidPolicy"
	// ReasonConfigurationPending: the server's ConfigMap does not hold this version of the
	// policy yet.
	ReasonConfigurationPending = "ConfigurationPending"
	// ReasonNoReadyEndpoints: the server's Service has no ready endpoint to ask.
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
	// ReasonPolicyServerUnreachable: a ready endpoint did not answer GET /policies.
	ReasonPolicyServerUnreachable = "PolicyServerUnreachable"
	// ReasonPolicyLoading: some replica does not serve the current configuration yet.
	ReasonPolicyLoading = "PolicyLoading"
	// ReasonPolicyLoadFailed: a replica failed to load the policy (the message has its error).
	ReasonPolicyLoadFailed = "PolicyLoadFailed"
	// ReasonWebhookRejected: the apiserver refused the webhook configuration.
	ReasonWebhookRejected = "WebhookRejected"
)

// Reasons of the PolicyServerConfigurationUpToDate and PolicyUniquelyReachable conditions.
const (
	ReasonConfigurationVersionMatch    = "ConfigurationVersionMatch"
	ReasonConfigurationVersionMismatch = "ConfigurationVersionMismatch"
	ReasonUnknownConfigurationVersion  = "UnknownConfigurationVersion"
	// ReasonUniquelyReachable: every ready replica serves the current configuration.
	ReasonUniquelyReachable = "ConfigurationUniquelyReachable"
	// ReasonOlderConfigurationReachable: some ready replica serves another configuration.
	ReasonOlderConfigurationReachable = "OlderConfigurationReachable"
)

// ReasonSecretsDeclared is the reason of the ReadsSecrets condition and of its Warning Event.
const ReasonSecretsDeclared = "SecretsInContextAwareResources"

// slowPollFactor slows polling where nothing is expected soon: a policy that failed to load
// (the server retries failed policies on its own, after 30 s at first), a server without
// ready endpoints, an active policy whose replicas catch up with another policy's change.
const slowPollFactor = 10

// conflictRetry is how soon a reconcile whose write conflicted runs again.
const conflictRetry = 100 * time.Millisecond

// maxConditionMessage bounds condition messages (the apiserver's limit is 32768).
const maxConditionMessage = 4096

// caBundler gives the PEM bundle every webhook trusts (CertManager).
type caBundler interface {
	CABundle(ctx context.Context) ([]byte, error)
}

// buildEntryFunc is BuildPolicyEntry: the policy's id and policies.yml entry on server ps, or
// why the server would refuse it.
type buildEntryFunc func(p v1.Policy, ps *v1.PolicyServer, o Options) (id string, entry config.Entry, err error)

// policyReconciler reconciles one policy kind: it brings the policy to its policy server's
// configuration (the PolicyServer reconciler writes it), waits until every replica serves it,
// registers its webhook and reports each stage in the policy's status.
type policyReconciler struct {
	client.Client
	o        Options
	kind     string
	newObj   func() v1.Policy
	newList  func() client.ObjectList
	certs    caBundler
	build    buildEntryFunc
	statuses *serverStatuses
	configs  *configCache
	events   record.EventRecorder
	// revs reads ControllerRevisions (uncached: mgr's API reader); nil reads through Client.
	revs client.Reader
}

// policyKinds returns, per kind, a new object and a new list.
func policyKinds() []struct {
	newObj  func() v1.Policy
	newList func() client.ObjectList
} {
	return []struct {
		newObj  func() v1.Policy
		newList func() client.ObjectList
	}{
		{func() v1.Policy { return &v1.ClusterAdmissionPolicy{} }, func() client.ObjectList { return &v1.ClusterAdmissionPolicyList{} }},
		{func() v1.Policy { return &v1.AdmissionPolicy{} }, func() client.ObjectList { return &v1.AdmissionPolicyList{} }},
		{func() v1.Policy { return &v1.ClusterAdmissionPolicyGroup{} }, func() client.ObjectList { return &v1.ClusterAdmissionPolicyGroupList{} }},
		{func() v1.Policy { return &v1.AdmissionPolicyGroup{} }, func() client.ObjectList { return &v1.AdmissionPolicyGroupList{} }},
	}
}

// newPolicyReconcilers returns the reconcilers of the four kinds, sharing one cache of server
// answers and of parsed ConfigMaps.
func newPolicyReconcilers(c client.Client, reader client.Reader, o Options, certs caBundler, build buildEntryFunc, events record.EventRecorder) []*policyReconciler {
	statuses := newServerStatuses(reader, o.Namespace)
	configs := &configCache{m: map[string]parsedConfig{}}
	var rs []*policyReconciler
	for _, k := range policyKinds() {
		rs = append(rs, &policyReconciler{
			Client:   c,
			o:        o,
			kind:     k.newObj().PolicyKind(),
			newObj:   k.newObj,
			newList:  k.newList,
			certs:    certs,
			build:    build,
			statuses: statuses,
			configs:  configs,
			events:   events,
		})
	}
	return rs
}

// setupPolicyReconcilers registers the reconcilers of the four policy kinds with mgr; certs
// gives the webhooks' caBundle.
func setupPolicyReconcilers(mgr ctrl.Manager, o Options, certs *CertManager) error {
	return setupPolicyReconcilersWith(mgr, o, certs, BuildPolicyEntry)
}

// setupPolicyReconcilersWith registers the four policy reconcilers with mgr.
func setupPolicyReconcilersWith(mgr ctrl.Manager, o Options, certs caBundler, build buildEntryFunc) error {
	events := mgr.GetEventRecorderFor("tollgate-controller") //nolint:staticcheck // the events/v1 recorder is not needed here
	for _, r := range newPolicyReconcilers(mgr.GetClient(), mgr.GetClient(), o, certs, build, events) {
		// ControllerRevisions are read when a policy's revision changes only: a cache would
		// hold every StatefulSet's and DaemonSet's revisions of the cluster.
		r.revs = mgr.GetAPIReader()
		if err := r.setupWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}

func (r *policyReconciler) setupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.kind)).
		For(r.newObj()).
		Watches(&v1.PolicyServer{}, handler.EnqueueRequestsFromMapFunc(r.mapPolicyServer), builder.WithPredicates(specOrDeletionChanged)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.mapConfigMap)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.mapEndpointSlice)).
		Watches(&admv1.ValidatingWebhookConfiguration{}, handler.EnqueueRequestsFromMapFunc(r.mapWebhook)).
		Watches(&admv1.MutatingWebhookConfiguration{}, handler.EnqueueRequestsFromMapFunc(r.mapWebhook)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.mapCASecret)).
		Complete(traced(r, r.o.Tracer, r.kind))
}

// specOrDeletionChanged lets through the PolicyServer updates that matter to its policies: a
// new spec or the start of its deletion, not its status.
var specOrDeletionChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
		!e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
}}

// policiesOf returns requests for the policies of this kind bound to policy server ps (all of
// them when ps is empty).
func (r *policyReconciler) policiesOf(ctx context.Context, ps string) []reconcile.Request {
	list := r.newList()
	if err := r.List(ctx, list); err != nil {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, it := range items {
		p, ok := it.(v1.Policy)
		if !ok || (ps != "" && policyServerName(p) != ps) {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()}})
	}
	return reqs
}

func (r *policyReconciler) mapPolicyServer(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.policiesOf(ctx, obj.GetName())
}

func (r *policyReconciler) mapConfigMap(ctx context.Context, obj client.Object) []reconcile.Request {
	ps := obj.GetLabels()[v1.PolicyServerLabel]
	if obj.GetNamespace() != r.o.Namespace || ps == "" || obj.GetName() != v1.PolicyServerObjectName(ps) {
		return nil
	}
	return r.policiesOf(ctx, ps)
}

func (r *policyReconciler) mapEndpointSlice(ctx context.Context, obj client.Object) []reconcile.Request {
	ps, ok := strings.CutPrefix(obj.GetLabels()[discoveryv1.LabelServiceName], v1.PolicyServerObjectName(""))
	if obj.GetNamespace() != r.o.Namespace || !ok || ps == "" {
		return nil
	}
	// The endpoints changed: the next poll asks the new set.
	r.statuses.Forget(ps)
	return r.policiesOf(ctx, ps)
}

func (r *policyReconciler) mapWebhook(_ context.Context, obj client.Object) []reconcile.Request {
	if !ownedWebhook(obj) {
		return nil
	}
	name, ns := obj.GetAnnotations()[v1.PolicyNameAnnotation], obj.GetAnnotations()[v1.PolicyNamespaceAnnotation]
	if name == "" || v1.PolicyID(r.kind, ns, name) != obj.GetName() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

func (r *policyReconciler) mapCASecret(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetNamespace() != r.o.Namespace || obj.GetName() != r.o.CASecret {
		return nil
	}
	return r.policiesOf(ctx, "")
}

func policyServerName(p v1.Policy) string {
	if ps := p.Webhook().PolicyServer; ps != "" {
		return ps
	}
	return "default"
}

// Reconcile brings one policy a step further: finalizer, stage, webhook, status.
func (r *policyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := r.newObj()
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	id := v1.PolicyID(r.kind, p.GetNamespace(), p.GetName())
	if !p.GetDeletionTimestamp().IsZero() {
		err := r.finalize(ctx, p, id)
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil // read again, quietly
		}
		return reconcile.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(p, v1.PolicyFinalizer) {
		controllerutil.AddFinalizer(p, v1.PolicyFinalizer)
		if err := r.Update(ctx, p); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{RequeueAfter: conflictRetry}, nil
			}
			return reconcile.Result{}, err
		}
	}
	before := p.PolicyStatus().DeepCopy()
	res, err := r.reconcileStage(ctx, p, id, before)
	if err == nil {
		err = r.writeStatus(ctx, p, before)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// A write raced with another (or the cache lags behind one): read again, quietly.
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// finalize deletes the policy's webhook configurations, then lets the policy go.
func (r *policyReconciler) finalize(ctx context.Context, p v1.Policy, id string) error {
	if !controllerutil.ContainsFinalizer(p, v1.PolicyFinalizer) {
		return nil
	}
	if _, err := deleteWebhooks(ctx, r.Client, p, id, nil); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(p, v1.PolicyFinalizer)
	return client.IgnoreNotFound(r.Update(ctx, p))
}

// writeStatus writes the status when it differs from before.
func (r *policyReconciler) writeStatus(ctx context.Context, p v1.Policy, before *v1.PolicyStatus) error {
	if equality.Semantic.DeepEqual(before, p.PolicyStatus()) {
		return nil
	}
	return client.IgnoreNotFound(r.Status().Update(ctx, p))
}

// reconcileStage finds the policy's stage, registers or removes its webhook accordingly and
// sets its status in place. The stages run in order; each either settles the policy (done:
// its status is set and the result says when to look again) or hands on what the next needs.
func (r *policyReconciler) reconcileStage(ctx context.Context, p v1.Policy, id string, before *v1.PolicyStatus) (reconcile.Result, error) {
	p.PolicyStatus().ObservedGeneration = p.GetGeneration()
	psName := policyServerName(p)
	r.warnSecrets(p, psName, before)

	ps, done, err := r.stageScheduled(ctx, p, id, psName)
	if done || err != nil {
		return reconcile.Result{}, err
	}
	entryDigest, cfg, done, err := r.stageConfigured(ctx, p, id, psName, ps, before)
	if done || err != nil {
		return reconcile.Result{}, err
	}
	v, res, done, err := r.stageServed(ctx, p, id, psName, cfg, entryDigest, before)
	if done || err != nil {
		return res, err
	}
	return r.stageActive(ctx, p, id, psName, entryDigest, v, before)
}

// stageScheduled gets the policy's PolicyServer. Without one, or while it is being deleted,
// nothing would answer a webhook: the policy's webhooks go and the policy is Unscheduled
// (no server) or Scheduled (server deleting), done.
func (r *policyReconciler) stageScheduled(ctx context.Context, p v1.Policy, id, psName string) (*v1.PolicyServer, bool, error) {
	var ps v1.PolicyServer
	if err := r.Get(ctx, client.ObjectKey{Name: psName}, &ps); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, err
		}
		// Nothing would answer a webhook: none.
		if _, err := deleteWebhooks(ctx, r.Client, p, id, nil); err != nil {
			return nil, false, err
		}
		r.setStage(p, v1.PolicyStatusUnscheduled, ReasonPolicyServerNotFound,
			fmt.Sprintf("no PolicyServer named %q", psName), v1.ModeUnknown)
		r.setUnknownVersion(p, fmt.Sprintf("no PolicyServer named %q", psName))
		return nil, true, nil
	}
	if !ps.DeletionTimestamp.IsZero() {
		if _, err := deleteWebhooks(ctx, r.Client, p, id, nil); err != nil {
			return nil, false, err
		}
		r.setStage(p, v1.PolicyStatusScheduled, ReasonPolicyServerDeleting,
			fmt.Sprintf("PolicyServer %q is being deleted", psName), v1.ModeUnknown)
		r.setUnknownVersion(p, fmt.Sprintf("PolicyServer %q is being deleted", psName))
		return nil, true, nil
	}
	return &ps, false, nil
}

// stageConfigured builds the policy's entry in the server's policies.yml and checks that the
// server's ConfigMap holds it. It returns the entry's digest and the parsed configuration;
// a policy the configuration leaves out (invalid, or its id taken by another policy) is
// Scheduled with InvalidPolicy, and one the ConfigMap does not hold yet Scheduled with
// ConfigurationPending, done.
func (r *policyReconciler) stageConfigured(ctx context.Context, p v1.Policy, id, psName string, ps *v1.PolicyServer, before *v1.PolicyStatus) (string, *parsedConfig, bool, error) {
	_, entry, err := r.build(p, ps, r.o)
	if err != nil {
		// The server's configuration leaves the policy out: its webhook would call a policy
		// the server does not have.
		if _, derr := deleteWebhooks(ctx, r.Client, p, id, nil); derr != nil {
			return "", nil, false, derr
		}
		r.setStage(p, v1.PolicyStatusScheduled, ReasonInvalidPolicy, err.Error(), v1.ModeUnknown)
		r.setUnknownVersion(p, "the policy is not in the policy server's configuration")
		r.warnOnChange(p, before, ReasonInvalidPolicy)
		return "", nil, true, nil
	}
	entryJSON, err := json.Marshal(entry)
	if err != nil {
		return "", nil, false, fmt.Errorf("policy %s: encoding its entry: %w", id, err)
	}
	entryDigest := status.Digest(entryJSON)

	cfg, err := r.config(ctx, psName)
	if err != nil {
		return "", nil, false, err
	}
	held := cfg != nil && cfg.holds(id, entryJSON)
	if cfg != nil && !held {
		if other, ok := cfg.owner(id); ok && other != (types.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()}) {
			// buildConfig keeps the first policy of an id that two policies share.
			msg := fmt.Sprintf("the id %s is already used by another policy (%s) on PolicyServer %q", id, other, psName)
			r.setStage(p, v1.PolicyStatusScheduled, ReasonInvalidPolicy, msg, v1.ModeUnknown)
			r.setUnknownVersion(p, "the policy is not in the policy server's configuration")
			r.warnOnChange(p, before, ReasonInvalidPolicy)
			return "", nil, true, nil
		}
	}
	if !held {
		what := "does not hold the policy yet"
		if cfg != nil && cfg.entries[id] != nil {
			what = "holds an older version of the policy"
		}
		// The replicas still serve the previous version, if any: the mode stays what it was.
		mode := p.PolicyStatus().Mode
		if mode == "" {
			mode = v1.ModeUnknown
		}
		r.setStage(p, v1.PolicyStatusScheduled, ReasonConfigurationPending,
			fmt.Sprintf("the ConfigMap %s/%s of PolicyServer %q %s", r.o.Namespace, v1.PolicyServerObjectName(psName), psName, what), mode)
		r.setUnknownVersion(p, "the policy server's configuration does not hold this version of the policy yet")
		return "", nil, true, nil
	}
	return entryDigest, cfg, false, nil
}

// stageServed asks the server's replicas (GET /policies) whether they serve the policy's
// current version and sets the version conditions. Until every replica does, the policy is
// Pending (unreachable replicas, a failed load, still loading) and polled, done; a failed load
// without an older version still served removes the webhook.
func (r *policyReconciler) stageServed(ctx context.Context, p v1.Policy, id, psName string, cfg *parsedConfig, entryDigest string, before *v1.PolicyStatus) (verdict, reconcile.Result, bool, error) {
	existing, err := getWebhook(ctx, r.Client, p, id)
	if err != nil {
		return verdict{}, reconcile.Result{}, false, err
	}
	// A policy whose entry did not change since its webhook was written stays active while
	// the replicas catch up with changes to other policies of the server.
	wasActive := existing != nil && existing.GetAnnotations()[policyEntryDigestAnnotation] == entryDigest

	v := evaluate(r.statuses.Get(ctx, psName), cfg.digest, id, wasActive)
	r.setVersionConditions(p, v)
	mode := v.policyMode()
	poll := reconcile.Result{RequeueAfter: r.o.StatusPollInterval}
	slowPoll := reconcile.Result{RequeueAfter: slowPollFactor * r.o.StatusPollInterval}

	switch {
	case v.err != nil:
		reason := ReasonPolicyServerUnreachable
		if errors.Is(v.err, ErrNoReadyEndpoints) {
			// New endpoints are seen through the EndpointSlice watch: no need to poll fast.
			reason, poll = ReasonNoReadyEndpoints, slowPoll
		}
		r.setStage(p, v1.PolicyStatusPending, reason, v.err.Error(), mode)
		return v, poll, true, nil
	case v.loadErr != "":
		if !v.stale {
			// Nothing serves the policy: a webhook would only fail requests.
			if _, err := deleteWebhooks(ctx, r.Client, p, id, nil); err != nil {
				return v, reconcile.Result{}, false, err
			}
		}
		r.setStage(p, v1.PolicyStatusPending, ReasonPolicyLoadFailed, v.loadErr, mode)
		r.warnOnChange(p, before, ReasonPolicyLoadFailed)
		return v, slowPoll, true, nil
	case !v.served:
		r.setStage(p, v1.PolicyStatusPending, ReasonPolicyLoading, v.waiting, mode)
		return v, poll, true, nil
	}
	return v, reconcile.Result{}, false, nil
}

// stageActive registers the webhook of a policy every replica serves (and removes the
// configuration of the other kind after a flip of mutating): the policy is Active. An
// apiserver that refuses the webhook, or a foreign configuration of the same name, leaves it
// Pending with WebhookRejected.
func (r *policyReconciler) stageActive(ctx context.Context, p v1.Policy, id, psName, entryDigest string, v verdict, before *v1.PolicyStatus) (reconcile.Result, error) {
	mode := v.policyMode()
	slowPoll := reconcile.Result{RequeueAfter: slowPollFactor * r.o.StatusPollInterval}
	ca, err := r.certs.CABundle(ctx)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("policy %s: CA bundle: %w", id, err)
	}
	desired := renderWebhook(p, id, r.o, ca, entryDigest)
	if _, err := applyWebhook(ctx, r.Client, p, desired); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || errors.Is(err, ErrForeignWebhook) {
			r.setStage(p, v1.PolicyStatusPending, ReasonWebhookRejected, webhookError(err), mode)
			r.warnOnChange(p, before, ReasonWebhookRejected)
			if errors.Is(err, ErrForeignWebhook) {
				// Its deletion is not watched (unless it is tollgate's).
				return slowPoll, nil
			}
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("policy %s: writing its webhook configuration: %w", id, err)
	}
	// After a flip of mutating, the configuration of the other kind goes.
	if _, err := deleteWebhooks(ctx, r.Client, p, id, desired); err != nil {
		return reconcile.Result{}, err
	}
	wasActiveStage := p.PolicyStatus().PolicyStatus == v1.PolicyStatusActive
	r.setStage(p, v1.PolicyStatusActive, ReasonPolicyActive,
		fmt.Sprintf("served by %d replica(s) of PolicyServer %q; webhook registered", v.replicas, psName), mode)
	if !wasActiveStage {
		r.events.Event(p, corev1.EventTypeNormal, ReasonPolicyActive, "the policy is active")
	}
	if err := r.recordRevision(ctx, p, v.policy); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		// The policy serves all the same: say so and try again later.
		r.events.Event(p, corev1.EventTypeWarning, ReasonRevisionFailed, err.Error())
		return slowPoll, nil
	}
	p.PolicyStatus().Shadow = shadowStatus(p, v.reports)
	if p.PolicyStatus().Shadow != nil {
		// Follow the candidate's divergences.
		return reconcile.Result{RequeueAfter: shadowPollFactor * r.o.StatusPollInterval}, nil
	}
	if v.current < v.asked {
		// Keep PolicyServerConfigurationUpToDate true to the replicas.
		return slowPoll, nil
	}
	return reconcile.Result{}, nil
}

func webhookError(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

// setStage sets the stage, the mode and the PolicyActive condition.
func (r *policyReconciler) setStage(p v1.Policy, stage v1.PolicyStatusEnum, reason, msg string, mode v1.PolicyModeStatus) {
	st := p.PolicyStatus()
	st.PolicyStatus = stage
	if mode != "" {
		st.Mode = mode
	}
	cond := metav1.ConditionFalse
	if stage == v1.PolicyStatusActive {
		cond = metav1.ConditionTrue
	}
	r.setCondition(p, v1.ConditionPolicyActive, cond, reason, msg)
}

func (r *policyReconciler) setCondition(p v1.Policy, typ string, s metav1.ConditionStatus, reason, msg string) {
	if len(msg) > maxConditionMessage {
		msg = strings.ToValidUTF8(msg[:maxConditionMessage-3], "") + "..."
	}
	meta.SetStatusCondition(&p.PolicyStatus().Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: p.GetGeneration(),
	})
}

// setUnknownVersion: no server status applies to the policy.
func (r *policyReconciler) setUnknownVersion(p v1.Policy, msg string) {
	r.setCondition(p, v1.ConditionConfigurationUpToDate, metav1.ConditionUnknown, ReasonUnknownConfigurationVersion, msg)
	r.setCondition(p, v1.ConditionPolicyUniquelyReachable, metav1.ConditionUnknown, ReasonUnknownConfigurationVersion, msg)
}

func (r *policyReconciler) setVersionConditions(p v1.Policy, v verdict) {
	switch {
	case v.err != nil || v.asked == 0:
		msg := "no replica answered"
		if v.err != nil {
			msg = v.err.Error()
		}
		r.setUnknownVersion(p, msg)
		return
	case v.current == v.asked:
		r.setCondition(p, v1.ConditionConfigurationUpToDate, metav1.ConditionTrue, ReasonConfigurationVersionMatch,
			fmt.Sprintf("every ready replica (%d) serves %s", v.asked, v.digest))
	default:
		msg := fmt.Sprintf("%d of %d ready replicas serve %s", v.current, v.asked, v.digest)
		if v.refused != "" {
			msg += "; " + v.refused
		}
		r.setCondition(p, v1.ConditionConfigurationUpToDate, metav1.ConditionFalse, ReasonConfigurationVersionMismatch, msg)
	}
	if v.other == 0 {
		r.setCondition(p, v1.ConditionPolicyUniquelyReachable, metav1.ConditionTrue, ReasonUniquelyReachable,
			"no ready replica serves another configuration")
	} else {
		r.setCondition(p, v1.ConditionPolicyUniquelyReachable, metav1.ConditionFalse, ReasonOlderConfigurationReachable,
			fmt.Sprintf("%d of %d ready replicas serve another configuration", v.other, v.asked))
	}
}

// warnSecrets sets the ReadsSecrets condition of a cluster-wide policy that declares Secrets in
// its contextAwareResources (or a group member that does), with a Warning Event when it
// appears or its message changes, and removes the condition otherwise: the ClusterRole the
// controller writes then lets the policy server read every Secret of the cluster.
func (r *policyReconciler) warnSecrets(p v1.Policy, psName string, before *v1.PolicyStatus) {
	who := declaresSecrets(p)
	if len(who) == 0 {
		meta.RemoveStatusCondition(&p.PolicyStatus().Conditions, v1.ConditionReadsSecrets)
		return
	}
	verb := "declare"
	if len(who) == 1 {
		verb = "declares"
	}
	msg := fmt.Sprintf("%s %s Secrets (v1) in contextAwareResources: PolicyServer %q gets get, list and watch on every Secret "+
		"of the cluster (ClusterRole %s), and the policy reads any of them; keep such policies on a PolicyServer of their own",
		strings.Join(who, ", "), verb, psName, ContextAwareRoleName(psName))
	r.setCondition(p, v1.ConditionReadsSecrets, metav1.ConditionTrue, ReasonSecretsDeclared, msg)
	if b := meta.FindStatusCondition(before.Conditions, v1.ConditionReadsSecrets); b != nil && b.Message == msg {
		return
	}
	r.events.Event(p, corev1.EventTypeWarning, ReasonSecretsDeclared, msg)
}

// declaresSecrets names what of p declares core/v1 Secrets in contextAwareResources: "the
// policy", or its members ("member NAME").
func declaresSecrets(p v1.Policy) []string {
	secret := func(rs []v1.ContextAwareResource) bool {
		for _, r := range rs {
			if r.Kind == "Secret" && r.APIVersion == "v1" {
				return true
			}
		}
		return false
	}
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		if secret(p.Spec.ContextAwareResources) {
			return []string{"the policy"}
		}
	case *v1.ClusterAdmissionPolicyGroup:
		var who []string
		for _, name := range slices.Sorted(maps.Keys(p.Spec.Policies)) {
			if secret(p.Spec.Policies[name].ContextAwareResources) {
				who = append(who, "member "+name)
			}
		}
		return who
	}
	return nil
}

// warnOnChange emits the PolicyActive condition's message as a Warning Event, once per
// distinct message: a reconcile that finds the error it found before stays quiet.
func (r *policyReconciler) warnOnChange(p v1.Policy, before *v1.PolicyStatus, reason string) {
	c := meta.FindStatusCondition(p.PolicyStatus().Conditions, v1.ConditionPolicyActive)
	if c == nil {
		return
	}
	if b := meta.FindStatusCondition(before.Conditions, v1.ConditionPolicyActive); b != nil && b.Reason == c.Reason && b.Message == c.Message {
		return
	}
	r.events.Event(p, corev1.EventTypeWarning, reason, c.Message)
}

// verdict sums up what the replicas of a policy's server answered about it.
type verdict struct {
	// err: no endpoint, or some endpoint did not answer.
	err error
	// asked replicas; current of them serve digest; other serve another configuration.
	asked, current, other int
	digest                string
	// served: every replica serves the policy's current version.
	served   bool
	replicas int
	// loadErr: the policy failed to load (stale: a previous version still serves).
	loadErr string
	stale   bool
	// waiting says what is still awaited when not served.
	waiting string
	// refused: a replica read the configuration and refused it as a whole (the reason).
	refused string
	// mode the policy is served in, "" when no replica serves it.
	mode string
	// policy is the policy as a replica serving its current version reports it (module
	// digests), nil when none does; reports has every such replica's report.
	policy  *status.Policy
	reports []*status.Policy
}

// policyMode is the mode the policy's status shows: the replicas' mode, unknown when no
// replica serves the policy.
func (v verdict) policyMode() v1.PolicyModeStatus {
	if v.mode == "" {
		return v1.ModeUnknown
	}
	return v1.PolicyModeStatus(v.mode)
}

// evaluate reads the replicas' answers. A replica serves the policy when it serves the
// configuration whose digest is digest and the policy is loaded at that version; with
// wasActive (the policy's entry has not changed since its webhook was written), a replica on
// another configuration that has the policy loaded counts too.
func evaluate(ss *serverStatus, digest, id string, wasActive bool) verdict {
	v := verdict{digest: digest}
	if ss.Err != nil {
		v.err = ss.Err
		return v
	}
	var unreachable, loadErrs, waiting []string
	servedBy := 0
	for _, e := range ss.Endpoints {
		if e.Err != nil {
			unreachable = append(unreachable, e.Err.Error())
			continue
		}
		v.asked++
		ps := e.Policies
		if ps.ConfigDigest == digest {
			v.current++
		} else {
			v.other++
		}
		var pol *status.Policy
		for i := range ps.Policies {
			if ps.Policies[i].ID == id {
				pol = &ps.Policies[i]
				break
			}
		}
		if pol != nil && pol.State == status.StateReady && v.mode == "" {
			v.mode = pol.Mode
		}
		err := ps.Serves(digest, id)
		switch {
		case err == nil:
			servedBy++
			if pol != nil {
				v.reports = append(v.reports, pol)
			}
		case errors.Is(err, status.ErrOtherConfig):
			refused := !ps.LastReload.OK && ps.LastReload.Digest == digest
			if refused {
				v.refused = fmt.Sprintf("the policy server refused policies.yml %s: %s", digest, ps.LastReload.Error)
			}
			switch {
			case wasActive && pol != nil && pol.Current():
				// The policy's entry is the one this replica serves.
				servedBy++
				v.reports = append(v.reports, pol)
			case refused:
				// The server read the configuration and refused it as a whole: the policy
				// cannot load until the file is fixed.
				loadErrs = append(loadErrs, v.refused)
				if pol != nil && pol.Current() {
					v.stale = true
				}
			default:
				waiting = append(waiting, fmt.Sprintf("%s serves %s", e.Addr, orNone(ps.ConfigDigest)))
			}
		case errors.Is(err, status.ErrNotLoaded) && pol != nil && (pol.Loading || pol.State == status.StateLoading):
			// Still loading its new version (the previous one may serve meanwhile): not a
			// failure, and soon done.
			waiting = append(waiting, fmt.Sprintf("%s is still loading the policy", e.Addr))
		case errors.Is(err, status.ErrNotLoaded) && pol != nil:
			loadErrs = append(loadErrs, pol.Error)
			if pol.Stale {
				v.stale = true
			}
		default:
			loadErrs = append(loadErrs, err.Error())
		}
	}
	if len(unreachable) > 0 {
		v.err = errors.New(strings.Join(dedup(unreachable), "; "))
		return v
	}
	if len(loadErrs) > 0 {
		v.loadErr = strings.Join(dedup(loadErrs), "; ")
		return v
	}
	v.replicas = servedBy
	if len(v.reports) > 0 {
		v.policy = v.reports[0]
	}
	v.served = servedBy == v.asked && v.asked > 0
	if !v.served {
		v.waiting = fmt.Sprintf("%d of %d ready replicas serve policies.yml %s: waiting for %s",
			servedBy, v.asked, digest, strings.Join(waiting, ", "))
	}
	return v
}

func orNone(s string) string {
	if s == "" {
		return "no policies.yml"
	}
	return s
}

func dedup(ss []string) []string {
	sort.Strings(ss)
	out := ss[:0]
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// parsedConfig is a policy server's ConfigMap as the policy reconcilers need it.
type parsedConfig struct {
	resourceVersion string
	// digest of policies.yml: the ConfigMap's annotation (computed when missing).
	digest string
	// entries by policy id, as JSON.
	entries map[string]json.RawMessage
}

// holds reports whether the configuration has the policy id with the entry entryJSON.
func (c *parsedConfig) holds(id string, entryJSON []byte) bool {
	have, ok := c.entries[id]
	if !ok {
		return false
	}
	a, errA := decodeJSON(have)
	b, errB := decodeJSON(entryJSON)
	return errA == nil && errB == nil && reflect.DeepEqual(a, b)
}

// decodeJSON decodes b keeping numbers as written, so that no digit of a large one is lost.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// owner returns the namespace and name of the policy the configuration has under id.
func (c *parsedConfig) owner(id string) (types.NamespacedName, bool) {
	var e struct {
		NamespacedName *struct{ Namespace, Name string } `json:"namespacedName"`
	}
	if have, ok := c.entries[id]; !ok || json.Unmarshal(have, &e) != nil || e.NamespacedName == nil {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: e.NamespacedName.Namespace, Name: e.NamespacedName.Name}, true
}

// configCache keeps the last parse of each server's ConfigMap, by resourceVersion: the
// policies of one server share it.
type configCache struct {
	mu sync.Mutex
	m  map[string]parsedConfig
}

// config returns the parsed ConfigMap of policy server ps, nil when there is none yet.
func (r *policyReconciler) config(ctx context.Context, ps string) (*parsedConfig, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: r.o.Namespace, Name: v1.PolicyServerObjectName(ps)}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	r.configs.mu.Lock()
	c, ok := r.configs.m[ps]
	r.configs.mu.Unlock()
	if ok && c.resourceVersion == cm.ResourceVersion && cm.ResourceVersion != "" {
		return &c, nil
	}
	data := []byte(cm.Data[v1.PoliciesKey])
	c = parsedConfig{resourceVersion: cm.ResourceVersion, digest: cm.Annotations[v1.ConfigDigestAnnotation]}
	if c.digest == "" {
		c.digest = status.Digest(data)
	}
	// The controller writes JSON; YAML (written by hand) is read too, but its conversion to
	// JSON does not keep numbers as written. An unreadable file holds no policy: the
	// PolicyServer reconciler reports it.
	js := data
	if !json.Valid(js) {
		js, _ = yaml.YAMLToJSON(data)
	}
	_ = json.Unmarshal(js, &c.entries)
	r.configs.mu.Lock()
	r.configs.m[ps] = c
	r.configs.mu.Unlock()
	return &c, nil
}
