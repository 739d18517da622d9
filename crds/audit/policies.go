package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// Policy annotations read for reports (Kubewarden's, copied from the module's metadata by
// kwctl scaffold manifest).
const (
	AnnotationSeverity = "io.kubewarden.policy.severity"
	AnnotationCategory = "io.kubewarden.policy.category"
)

// severities are the values the report CRDs accept.
var severities = []string{"critical", "high", "medium", "low", "info"}

// target is one listable resource a policy's rules match.
type target struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// ListPolicies returns the policies of the four kinds in the cluster.
func ListPolicies(ctx context.Context, c client.Reader) ([]v1.Policy, error) {
	var out []v1.Policy
	lists := []struct {
		kind string
		list client.ObjectList
	}{
		{"ClusterAdmissionPolicy", &v1.ClusterAdmissionPolicyList{}},
		{"AdmissionPolicy", &v1.AdmissionPolicyList{}},
		{"ClusterAdmissionPolicyGroup", &v1.ClusterAdmissionPolicyGroupList{}},
		{"AdmissionPolicyGroup", &v1.AdmissionPolicyGroupList{}},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list); err != nil {
			return nil, fmt.Errorf("listing %ss: %w", l.kind, err)
		}
		out = append(out, items(l.list)...)
	}
	return out, nil
}

// items are a policy list's items as Policies.
func items(l client.ObjectList) []v1.Policy {
	var out []v1.Policy
	switch l := l.(type) {
	case *v1.ClusterAdmissionPolicyList:
		out = pointers(l.Items)
	case *v1.AdmissionPolicyList:
		out = pointers(l.Items)
	case *v1.ClusterAdmissionPolicyGroupList:
		out = pointers(l.Items)
	case *v1.AdmissionPolicyGroupList:
		out = pointers(l.Items)
	}
	return out
}

func pointers[T any, P interface {
	*T
	v1.Policy
}](in []T) []v1.Policy {
	out := make([]v1.Policy, len(in))
	for i := range in {
		out[i] = P(&in[i])
	}
	return out
}

// NewPolicy wraps a policy resource.
func NewPolicy(p v1.Policy) *Policy {
	server := p.Webhook().PolicyServer
	if server == "" {
		server = "default"
	}
	return &Policy{ID: v1.PolicyID(p.PolicyKind(), p.GetNamespace(), p.GetName()), Object: p, Server: server}
}

// selectPolicies decides which policies take part, as Kubewarden's scanner does
// (../shared/AUDIT.md "Which policies"): rules using "*" or without CREATE are dropped, a policy
// left without rules is skipped, as is one with backgroundAudit false or not active (unless
// explicit: given by the caller); a rule the RESTMapper cannot map errors the policy.
func selectPolicies(all []*Policy, explicit bool, mapper meta.RESTMapper, s *Summary) []*Policy {
	var out []*Policy
	for _, p := range all {
		w := p.Object.Webhook()
		if !explicit {
			if w.BackgroundAudit != nil && !*w.BackgroundAudit {
				s.Skipped = append(s.Skipped, PolicyNote{p.ID, "backgroundAudit is false"})
				continue
			}
			if st := p.Object.PolicyStatus().PolicyStatus; st != v1.PolicyStatusActive {
				s.Skipped = append(s.Skipped, PolicyNote{p.ID, fmt.Sprintf("not active (policyStatus %q)", st)})
				continue
			}
		}
		targets, reason, err := expandRules(w.Rules, p.Object.IsNamespaced(), mapper)
		if err != nil {
			s.Errored = append(s.Errored, PolicyNote{p.ID, err.Error()})
			continue
		}
		if len(targets) == 0 {
			s.Skipped = append(s.Skipped, PolicyNote{p.ID, reason})
			continue
		}
		p.rules = targets
		p.severity, p.category = annotations(p, s)
		if userDependent(p.Object) {
			s.Warnings = append(s.Warnings, PolicyNote{p.ID, "the policy mentions userInfo: its verdict may depend on the requesting user, which an audit does not have (the synthetic request's userInfo is empty); set backgroundAudit: false if its results mislead"})
		}
		out = append(out, p)
	}
	return out
}

// expandRules returns the listable resources of rules. reason says why there are none.
func expandRules(rules []v1.RuleWithOperations, namespacedPolicy bool, mapper meta.RESTMapper) ([]target, string, error) {
	var out []target
	wildcard, noCreate := 0, 0
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.APIVersions, "*") || slices.ContainsFunc(r.Resources, func(s string) bool { return strings.Contains(s, "*") }) {
			wildcard++
			continue
		}
		if !slices.Contains(r.Operations, v1.OperationType("CREATE")) {
			noCreate++
			continue
		}
		groups := r.APIGroups
		if len(groups) == 0 {
			groups = []string{""}
		}
		for _, g := range groups {
			for _, v := range r.APIVersions {
				for _, res := range r.Resources {
					if strings.Contains(res, "/") {
						continue // a subresource: nothing to list
					}
					gvr := schema.GroupVersionResource{Group: g, Version: v, Resource: res}
					gvk, err := mapper.KindFor(gvr)
					if err != nil {
						return nil, "", fmt.Errorf("rule %s: %w", gvrString(gvr), err)
					}
					m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
					if err != nil {
						return nil, "", fmt.Errorf("rule %s: %w", gvrString(gvr), err)
					}
					namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
					if r.Scope != nil && (*r.Scope == "Cluster" && namespaced || *r.Scope == "Namespaced" && !namespaced) {
						continue
					}
					if namespacedPolicy && !namespaced {
						continue
					}
					t := target{gvr: gvr, kind: gvk.Kind, namespaced: namespaced}
					if !slices.Contains(out, t) {
						out = append(out, t)
					}
				}
			}
		}
	}
	if len(out) > 0 {
		return out, "", nil
	}
	switch {
	case wildcard > 0 && noCreate > 0:
		return nil, "every rule uses \"*\" or lacks the CREATE operation (an audit lists named resources only and sends CREATE requests; operation \"*\" does not count, as in Kubewarden's scanner)", nil
	case wildcard > 0:
		return nil, "every rule uses \"*\" in apiGroups, apiVersions or resources (an audit lists named resources only)", nil
	case noCreate > 0:
		return nil, "no rule has the CREATE operation (an audit sends CREATE requests; operation \"*\" does not count, as in Kubewarden's scanner)", nil
	}
	return nil, "the rules name no listable resource (subresources only, or a scope that excludes them)", nil
}

func gvrString(g schema.GroupVersionResource) string {
	if g.Group == "" {
		return g.Version + "/" + g.Resource
	}
	return g.Group + "/" + g.Version + "/" + g.Resource
}

// annotations returns the severity and category of a policy's results: monitor mode is info
// (Kubewarden's rule), else the severity annotation if the report CRDs accept it.
func annotations(p *Policy, s *Summary) (severity, category string) {
	a := p.Object.GetAnnotations()
	category = a[AnnotationCategory]
	severity = a[AnnotationSeverity]
	if severity != "" && !slices.Contains(severities, severity) {
		s.Warnings = append(s.Warnings, PolicyNote{p.ID, fmt.Sprintf("annotation %s: value %q is not one of %s: left out of the results", AnnotationSeverity, severity, strings.Join(severities, ", "))})
		severity = ""
	}
	if p.Object.Webhook().Mode == v1.ModeMonitor {
		severity = "info"
	}
	return severity, category
}

// userDependent says whether a policy's spec mentions the requesting user (settings, group
// members' settings, match conditions): a heuristic for the warning, since an audit's request
// has no user.
func userDependent(p v1.Policy) bool {
	b, err := json.Marshal(p)
	if err != nil {
		return false
	}
	var v struct {
		Spec json.RawMessage `json:"spec"`
	}
	_ = json.Unmarshal(b, &v)
	spec := strings.ToLower(string(v.Spec))
	return strings.Contains(spec, "userinfo") || strings.Contains(spec, "user_info")
}

// matches says whether p audits objects of t in a namespace with nsLabels (nil for a
// cluster-scoped object), given the object's labels.
func (p *Policy) matches(t target, nsLabels, objLabels map[string]string) (bool, error) {
	if !slices.Contains(p.rules, t) {
		return false, nil
	}
	w := p.Object.Webhook()
	if ok, err := selects(w.ObjectSelector, objLabels); !ok || err != nil {
		return false, err
	}
	sel, _ := p.Object.Selector()
	if p.webhook != nil {
		sel = p.webhook.namespaceSelector
	}
	switch {
	case t.namespaced && nsLabels != nil:
		if p.Object.IsNamespaced() && p.webhook == nil {
			return true, nil // the namespace pass only offers it its own namespace
		}
		return selects(sel, nsLabels)
	case t.gvr.Group == "" && t.gvr.Resource == "namespaces":
		// a webhook's namespaceSelector applies to a Namespace's own labels
		return selects(sel, objLabels)
	}
	return true, nil
}

func selects(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	if sel == nil {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}
