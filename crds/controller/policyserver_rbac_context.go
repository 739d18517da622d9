package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// The controller writes a ClusterRole granting what policies declare, so it needs escalate
// (or to hold those permissions itself) and bind on ClusterRoles:
//
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=escalate;bind

// ContextAwareRoleName is the name of the ClusterRole (and of its ClusterRoleBinding) that
// grants PolicyServer ps's ServiceAccount read access to the kinds its policies declare in
// contextAwareResources.
func ContextAwareRoleName(ps string) string {
	return "tollgate-" + v1.PolicyServerObjectName(ps) + "-context-aware"
}

// contextAccess is what a PolicyServer's policies may read from the cluster, from the
// policies.yml the controller wrote for it.
type contextAccess struct {
	// resources are the declared kinds, sorted and without duplicates.
	resources []resourceKind
	// canI: some policy may call kubernetes/can_i (its hostCapabilities allow it) and the
	// server has a Kubernetes client (some policy declares contextAwareResources: tollgate
	// serve makes one only then).
	canI bool
}

type resourceKind struct{ apiVersion, kind string }

// contextAccessOf reads the contextAwareResources and hostCapabilities of every entry and group
// member of a policies.yml (the JSON buildConfig writes).
func contextAccessOf(policiesYML []byte) (contextAccess, error) {
	type entry struct {
		ContextAwareResources []struct{ APIVersion, Kind string } `json:"contextAwareResources"`
		HostCapabilities      *[]string                           `json:"hostCapabilities"`
		Policies              map[string]entry                    `json:"policies"`
	}
	var entries map[string]entry
	if err := json.Unmarshal(policiesYML, &entries); err != nil {
		return contextAccess{}, fmt.Errorf("reading policies.yml: %w", err)
	}
	var a contextAccess
	seen := map[resourceKind]bool{}
	mayCanI := false
	var visit func(e entry)
	visit = func(e entry) {
		for _, r := range e.ContextAwareResources {
			k := resourceKind{r.APIVersion, r.Kind}
			if !seen[k] {
				seen[k] = true
				a.resources = append(a.resources, k)
			}
		}
		// A group's own entry has no hostCapabilities: its members carry them.
		if e.Policies == nil && allowsCanI(e.HostCapabilities) {
			mayCanI = true
		}
		for _, m := range e.Policies {
			visit(m)
		}
	}
	for _, e := range entries {
		visit(e)
	}
	sort.Slice(a.resources, func(i, j int) bool {
		if a.resources[i].apiVersion != a.resources[j].apiVersion {
			return a.resources[i].apiVersion < a.resources[j].apiVersion
		}
		return a.resources[i].kind < a.resources[j].kind
	})
	a.canI = mayCanI && len(a.resources) > 0
	return a, nil
}

// allowsCanI reports whether hostCapabilities patterns let a policy call kubernetes/can_i (an
// absent list allows everything, as tollgate serve reads it).
func allowsCanI(patterns *[]string) bool {
	if patterns == nil {
		return true
	}
	for _, p := range *patterns {
		if p == "*" || p == "kubernetes/*" || p == "kubernetes/can_i" {
			return true
		}
	}
	return false
}

// contextAwareRules maps the declared kinds to RBAC rules through discovery: one rule per API
// group granting get, list and watch (what the server's informers and direct reads need) on the
// group's resources, and create on subjectaccessreviews for can_i. Kinds discovery does not
// know (a CRD not installed yet) get no rule and are returned as unknown.
func contextAwareRules(mapper meta.RESTMapper, a contextAccess) (rules []rbacv1.PolicyRule, unknown []string, err error) {
	byGroup := map[string][]string{}
	for _, r := range a.resources {
		gv, perr := schema.ParseGroupVersion(r.apiVersion)
		if perr != nil {
			unknown = append(unknown, r.apiVersion+"/"+r.kind)
			continue
		}
		m, merr := mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: r.kind}, gv.Version)
		if meta.IsNoMatchError(merr) {
			unknown = append(unknown, r.apiVersion+"/"+r.kind)
			continue
		}
		if merr != nil {
			return nil, nil, fmt.Errorf("discovery of %s/%s: %w", r.apiVersion, r.kind, merr)
		}
		if !slices.Contains(byGroup[gv.Group], m.Resource.Resource) {
			byGroup[gv.Group] = append(byGroup[gv.Group], m.Resource.Resource)
		}
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		res := byGroup[g]
		sort.Strings(res)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: res, Verbs: []string{"get", "list", "watch"}})
	}
	if a.canI {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}})
	}
	return rules, unknown, nil
}

// reconcileContextAwareRBAC keeps the ClusterRole ContextAwareRoleName(ps.Name), with the rules
// its policies need (contextAwareRules), and its ClusterRoleBinding to the server's
// ServiceAccount; both are controlled by the PolicyServer (garbage collection removes them with
// it). When no policy of the server declares contextAwareResources, both are deleted.
//
// They are read with the API reader, not the manager's cache: caching ClusterRoles would watch
// every ClusterRole of the cluster, and a controller without the permission (an older chart)
// would never start. A server without context-aware policies costs two GETs per reconcile and
// needs no permission at all. It returns the condition message (kinds discovery did not know).
func (r *PolicyServerReconciler) reconcileContextAwareRBAC(ctx context.Context, ps *v1.PolicyServer, policiesYML []byte) (string, error) {
	if r.APIReader == nil {
		return "", nil
	}
	a, err := contextAccessOf(policiesYML)
	if err != nil {
		return "", err
	}
	name := ContextAwareRoleName(ps.Name)
	if len(a.resources) == 0 {
		return "", r.deleteContextAwareRBAC(ctx, name)
	}
	mapper := r.RESTMapper
	if mapper == nil {
		mapper = r.Client.RESTMapper()
	}
	rules, unknown, err := contextAwareRules(mapper, a)
	if err != nil {
		return "", err
	}
	msg := ""
	if len(unknown) > 0 {
		msg = "contextAwareResources not known to the apiserver (no rule for them yet): " + strings.Join(unknown, ", ")
	}
	labels := r.objectMeta(ps).Labels
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
	if err := applyClusterScoped(ctx, r, ps, role, &rbacv1.ClusterRole{}); err != nil {
		return msg, fmt.Errorf("ClusterRole %s: %w", name, err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serverServiceAccount(ps), Namespace: r.Options.Namespace}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}
	if err := applyClusterScoped(ctx, r, ps, binding, &rbacv1.ClusterRoleBinding{}); err != nil {
		return msg, fmt.Errorf("ClusterRoleBinding %s: %w", name, err)
	}
	return msg, nil
}

// applyClusterScoped applies obj, controlled by the PolicyServer; the stored version (read into
// live) comes from the API reader, not the cache.
func applyClusterScoped(ctx context.Context, r *PolicyServerReconciler, ps *v1.PolicyServer, obj, live client.Object) error {
	if err := controllerutil.SetControllerReference(ps, obj, r.Client.Scheme()); err != nil {
		return err
	}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live)
	if apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return err
	}
	_, err = applyOwned(ctx, r.Client, obj, live)
	return err
}

// deleteContextAwareRBAC deletes the ClusterRole and ClusterRoleBinding name when they exist.
// A controller that may not even read them cannot have made them: Forbidden is not an error.
func (r *PolicyServerReconciler) deleteContextAwareRBAC(ctx context.Context, name string) error {
	var errs []error
	for _, obj := range []client.Object{&rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRole{}} {
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, obj)
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			continue
		}
		if err == nil {
			uid := obj.GetUID()
			err = client.IgnoreNotFound(r.Client.Delete(ctx, obj, client.Preconditions{UID: &uid}))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, name, err))
		}
	}
	return errors.Join(errs...)
}
