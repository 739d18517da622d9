package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
)

// The authorizer that CEL's `authorizer` (and authorizer.requestResource,
// .serviceAccount(...), .path(...)) asks, answering from what the host can
// know: the settings.
//
// It is the apiserver's authorizer chain of a cluster run with
// --authorization-mode=RBAC: the privileged-group authorizer (members of
// system:masters are allowed everything; the apiserver always puts it first,
// whatever the modes), then the RBAC authorizer over the RBAC objects of the
// settings. Without "rbac" in the settings the second step is the sandbox
// authorizer (no opinion), so only system:masters is allowed. Nothing answers
// "deny": like RBAC, a check that is not allowed gets "no opinion" (CEL's
// allowed() is false, denied() is false too).
//
// The decisions are static (the objects never change), so the authorizer is
// safe for concurrent use and needs no per-request cache.
func newAuthorizer(r *RBAC) authorizer.Authorizer {
	var second authorizer.Authorizer = sandboxAuthorizer{}
	if r != nil {
		second = newRBACAuthorizer(r)
	}
	return union.New(privilegedGroups{user.SystemPrivilegedGroup}, second)
}

// Authorizer is the authorizer the policy's CEL checks ask (test/rbacdiff
// compares it with Kubernetes' own).
func (e *Engine) Authorizer() authorizer.Authorizer { return e.authorizer }

// sandboxAuthorizer follows system:masters when the settings have no "rbac":
// a policy in the sandbox has no access to the cluster's authorizer, so every
// other check gets "no opinion", which CEL's authz library reports as not
// allowed.
type sandboxAuthorizer struct{}

func (sandboxAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "tollgate: the policy sandbox has no authorizer", nil
}

// privilegedGroups is the apiserver's privileged-group authorizer
// (authorizerfactory.NewPrivilegedGroups, not imported: its package links
// the webhook authorizer and its HTTP client into the module).
type privilegedGroups []string

func (g privilegedGroups) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "Error", fmt.Errorf("no user on request.")
	}
	for _, have := range u.GetGroups() {
		for _, priv := range g {
			if have == priv {
				return authorizer.DecisionAllow, "", nil
			}
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// rbacAuthorizer decides like Kubernetes' RBAC authorizer
// (plugin/pkg/auth/authorizer/rbac in k8s.io/kubernetes, which cannot be
// imported as a library): the ClusterRoleBindings, then, for a namespaced
// request, the RoleBindings of that namespace; each binding that has a
// subject matching the user contributes the rules of its role; the first
// rule that allows the request decides. A binding whose role does not exist
// contributes an error to the reason of a "no opinion".
//
// Bindings are visited in settings order (a cluster visits them in its
// informer's order, which only changes which binding the "allowed by" reason
// names). Each binding's role and "allowed by" reasons are resolved once,
// here: the objects never change, so a check only matches subjects and rules
// and allocates nothing.
type rbacAuthorizer struct {
	clusterRoleBindings []binding
	roleBindings        map[string][]binding // by namespace
}

// binding is a RoleBinding or ClusterRoleBinding with its role resolved
// and its reasons written.
type binding struct {
	namespace string // a RoleBinding's: its roleRef's and ServiceAccount subjects' default
	subjects  []rbacv1.Subject
	reasons   []string // by subject: the "allowed by" reason when it is the one that matches
	rules     []rbacv1.PolicyRule
	err       error // the role does not exist
}

func newRBACAuthorizer(r *RBAC) *rbacAuthorizer {
	roles := map[string][]rbacv1.PolicyRule{} // by namespace + "/" + name
	for _, role := range r.Roles {
		roles[role.Namespace+"/"+role.Name] = role.Rules
	}
	clusterRoles := aggregateClusterRoles(r.ClusterRoles)
	resolve := func(kind, name, namespace string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) binding {
		b := binding{namespace: namespace, subjects: subjects, reasons: make([]string, len(subjects))}
		for i := range subjects {
			b.reasons[i] = fmt.Sprintf("RBAC: allowed by %s %q of %s %q to %s",
				kind, name, ref.Kind, ref.Name, describeSubject(&subjects[i], namespace))
		}
		b.rules, b.err = roleRefRules(roles, clusterRoles, ref, namespace)
		return b
	}
	a := &rbacAuthorizer{roleBindings: map[string][]binding{}}
	for _, b := range r.ClusterRoleBindings {
		a.clusterRoleBindings = append(a.clusterRoleBindings, resolve("ClusterRoleBinding", b.Name, "", b.RoleRef, b.Subjects))
	}
	for _, b := range r.RoleBindings {
		a.roleBindings[b.Namespace] = append(a.roleBindings[b.Namespace],
			resolve("RoleBinding", b.Name+"/"+b.Namespace, b.Namespace, b.RoleRef, b.Subjects))
	}
	return a
}

func (a *rbacAuthorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	var errs []error
	if reason, ok := allowedBy(a.clusterRoleBindings, attrs, &errs); ok {
		return authorizer.DecisionAllow, reason, nil
	}
	if ns := attrs.GetNamespace(); ns != "" {
		if reason, ok := allowedBy(a.roleBindings[ns], attrs, &errs); ok {
			return authorizer.DecisionAllow, reason, nil
		}
	}
	reason := ""
	if len(errs) > 0 {
		reason = fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs))
	}
	return authorizer.DecisionNoOpinion, reason, nil
}

// allowedBy returns the "allowed by" reason of the first of the bindings
// that grants the request; the errors of the bindings that apply to the user
// but have no role are appended to errs.
func allowedBy(bindings []binding, attrs authorizer.Attributes, errs *[]error) (string, bool) {
	u := attrs.GetUser()
	for i := range bindings {
		b := &bindings[i]
		subject, ok := appliesTo(u, b.subjects, b.namespace)
		if !ok {
			continue
		}
		if b.err != nil {
			*errs = append(*errs, b.err)
			continue
		}
		for j := range b.rules {
			if ruleAllows(attrs, &b.rules[j]) {
				return b.reasons[subject], true
			}
		}
	}
	return "", false
}

// roleRefRules are the rules of the role a binding refers to; a missing role
// is the NotFound error of the apiserver's informer cache.
func roleRefRules(roles, clusterRoles map[string][]rbacv1.PolicyRule, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		rules, ok := roles[namespace+"/"+ref.Name]
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("role"), ref.Name)
		}
		return rules, nil
	case "ClusterRole":
		rules, ok := clusterRoles[ref.Name]
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), ref.Name)
		}
		return rules, nil
	default:
		return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
	}
}

// appliesTo returns the index of the first subject that matches the user.
// namespace is the namespace of a RoleBinding, the default of its
// ServiceAccount subjects.
func appliesTo(u user.Info, subjects []rbacv1.Subject, namespace string) (int, bool) {
	if u == nil {
		return 0, false
	}
	for i := range subjects {
		s := &subjects[i]
		switch s.Kind {
		case rbacv1.UserKind:
			if u.GetName() == s.Name {
				return i, true
			}
		case rbacv1.GroupKind:
			for _, g := range u.GetGroups() {
				if g == s.Name {
					return i, true
				}
			}
		case rbacv1.ServiceAccountKind:
			ns := namespace
			if s.Namespace != "" {
				ns = s.Namespace
			}
			if ns != "" && serviceaccount.MatchesUsername(ns, s.Name, u.GetName()) {
				return i, true
			}
		}
	}
	return 0, false
}

// describeSubject names a subject in an "allowed by" reason, as RBAC does.
func describeSubject(s *rbacv1.Subject, bindingNamespace string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNamespace
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// ruleAllows is RBAC's rule matching. A resource request matches the verb,
// the API group, the resource (resource/subresource, with `*` for every
// resource and `*/sub` for a subresource of every resource) and, when the
// rule lists resourceNames, the name. A non-resource request matches the verb
// and the path (`*` for every path, a trailing `*` for a prefix).
//
// k8s.io/component-helpers/auth/rbac/validation (importable) answers whether
// rules cover other rules, for escalation checks; it differs from this on
// edge cases (a rule with resourceNames [""], a resource named "x/y" without
// subresource), so it is not used.
func ruleAllows(a authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if !matchesWildcard(rule.Verbs, rbacv1.VerbAll, a.GetVerb()) {
		return false
	}
	if !a.IsResourceRequest() {
		path := a.GetPath()
		for _, u := range rule.NonResourceURLs {
			if u == rbacv1.NonResourceAll || u == path ||
				(strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*"))) {
				return true
			}
		}
		return false
	}
	if !matchesWildcard(rule.APIGroups, rbacv1.APIGroupAll, a.GetAPIGroup()) {
		return false
	}
	resource, sub := a.GetResource(), a.GetSubresource()
	combined := resource
	if sub != "" {
		combined = resource + "/" + sub
	}
	resourceOK := false
	for _, r := range rule.Resources {
		if r == rbacv1.ResourceAll || r == combined || (sub != "" && r == "*/"+sub) {
			resourceOK = true
			break
		}
	}
	if !resourceOK {
		return false
	}
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == a.GetName() {
			return true
		}
	}
	return false
}

func matchesWildcard(list []string, all, want string) bool {
	for _, v := range list {
		if v == all || v == want {
			return true
		}
	}
	return false
}

// aggregateClusterRoles gives the rules of every ClusterRole as the
// clusterrole-aggregation controller of kube-controller-manager leaves them:
// a ClusterRole with an aggregationRule holds the rules of every other
// ClusterRole selected by one of its selectors (selectors in order, selected
// roles by name, a rule equal to one already held skipped), in place of the
// rules it lists itself. Aggregated roles may select aggregated roles; the
// result is the fixed point reached from aggregated roles without rules (in a
// cluster the controller converges to it as it re-syncs on every change).
func aggregateClusterRoles(roles []*rbacv1.ClusterRole) map[string][]rbacv1.PolicyRule {
	rules := make(map[string][]rbacv1.PolicyRule, len(roles))
	sorted := make([]*rbacv1.ClusterRole, len(roles))
	copy(sorted, roles)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	// An aggregated role and the roles it selects (selectors in order, roles
	// by name): which roles are selected never changes, only their rules do.
	type aggregated struct {
		name    string
		members []string
	}
	var agg []aggregated
	for _, r := range sorted {
		if r.AggregationRule == nil {
			rules[r.Name] = r.Rules
			continue
		}
		rules[r.Name] = nil
		a := aggregated{name: r.Name}
		for i := range r.AggregationRule.ClusterRoleSelectors {
			sel, err := metav1.LabelSelectorAsSelector(&r.AggregationRule.ClusterRoleSelectors[i])
			if err != nil {
				continue // validated in decodeRBAC: cannot happen
			}
			for _, m := range sorted {
				if m.Name != r.Name && sel.Matches(labels.Set(m.Labels)) {
					a.members = append(a.members, m.Name)
				}
			}
		}
		agg = append(agg, a)
	}
	// Each pass can only add rules; the number of distinct rules is finite.
	for pass := 0; pass <= len(roles)*len(roles)+1; pass++ {
		changed := false
		for _, a := range agg {
			var next []rbacv1.PolicyRule
			for _, m := range a.members {
				for _, rule := range rules[m] {
					if !ruleExists(next, rule) {
						next = append(next, rule)
					}
				}
			}
			if !equality.Semantic.DeepEqual(next, rules[a.name]) {
				rules[a.name] = next
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return rules
}

func ruleExists(list []rbacv1.PolicyRule, rule rbacv1.PolicyRule) bool {
	for _, r := range list {
		if equality.Semantic.DeepEqual(r, rule) {
			return true
		}
	}
	return false
}
