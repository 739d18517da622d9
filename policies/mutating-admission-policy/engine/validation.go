package engine

import (
	"regexp"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The subset of the apiserver's create-time validation of
// MutatingAdmissionPolicy and its binding that decides whether the policy can
// run at all. Messages use the apiserver's field.Error format.

const maxMatchConditions = 64

var celIdentifier = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)

func validatePolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	s := &p.Spec
	if s.ParamKind != nil {
		if s.ParamKind.APIVersion == "" {
			errs = append(errs, field.Required(spec.Child("paramKind", "apiVersion"), ""))
		}
		if s.ParamKind.Kind == "" {
			errs = append(errs, field.Required(spec.Child("paramKind", "kind"), ""))
		}
	}
	if s.MatchConstraints == nil {
		errs = append(errs, field.Required(spec.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, validateMatchResources(s.MatchConstraints, spec.Child("matchConstraints"), true)...)
	}
	switch *s.FailurePolicy {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		errs = append(errs, field.NotSupported(spec.Child("failurePolicy"), *s.FailurePolicy, []string{"Fail", "Ignore"}))
	}
	switch s.ReinvocationPolicy {
	case admissionregistrationv1.NeverReinvocationPolicy, admissionregistrationv1.IfNeededReinvocationPolicy:
	case "":
		errs = append(errs, field.Required(spec.Child("reinvocationPolicy"), "must be one of Never, IfNeeded"))
	default:
		errs = append(errs, field.NotSupported(spec.Child("reinvocationPolicy"), s.ReinvocationPolicy, []string{"IfNeeded", "Never"}))
	}
	names := sets.New[string]()
	for i, v := range s.Variables {
		p := spec.Child("variables").Index(i)
		switch {
		case v.Name == "":
			errs = append(errs, field.Required(p.Child("name"), "name is not specified"))
		case !celIdentifier.MatchString(v.Name):
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, "name is not a valid CEL identifier"))
		case names.Has(v.Name):
			errs = append(errs, field.Duplicate(p.Child("name"), v.Name))
		}
		names.Insert(v.Name)
		if v.Expression == "" {
			errs = append(errs, field.Required(p.Child("expression"), "expression is not specified"))
		}
	}
	if len(s.Mutations) == 0 {
		errs = append(errs, field.Required(spec.Child("mutations"), "mutations must contain at least one item"))
	}
	for i, m := range s.Mutations {
		p := spec.Child("mutations").Index(i)
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration == nil {
				errs = append(errs, field.Required(p.Child("applyConfiguration"), "applyConfiguration must be set when patchType is ApplyConfiguration"))
			} else if m.ApplyConfiguration.Expression == "" {
				errs = append(errs, field.Required(p.Child("applyConfiguration", "expression"), "expression is not specified"))
			}
			if m.JSONPatch != nil {
				errs = append(errs, field.Forbidden(p.Child("jsonPatch"), "must not be set when patchType is ApplyConfiguration"))
			}
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch == nil {
				errs = append(errs, field.Required(p.Child("jsonPatch"), "jsonPatch must be set when patchType is JSONPatch"))
			} else if m.JSONPatch.Expression == "" {
				errs = append(errs, field.Required(p.Child("jsonPatch", "expression"), "expression is not specified"))
			}
			if m.ApplyConfiguration != nil {
				errs = append(errs, field.Forbidden(p.Child("applyConfiguration"), "must not be set when patchType is JSONPatch"))
			}
		case "":
			errs = append(errs, field.Required(p.Child("patchType"), "patchType is not specified"))
		default:
			errs = append(errs, field.NotSupported(p.Child("patchType"), m.PatchType, []string{"ApplyConfiguration", "JSONPatch"}))
		}
	}
	if len(s.MatchConditions) > maxMatchConditions {
		errs = append(errs, field.TooMany(spec.Child("matchConditions"), len(s.MatchConditions), maxMatchConditions))
	}
	condNames := sets.New[string]()
	for i, c := range s.MatchConditions {
		p := spec.Child("matchConditions").Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else if condNames.Has(c.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		condNames.Insert(c.Name)
		if c.Expression == "" {
			errs = append(errs, field.Required(p.Child("expression"), ""))
		}
	}
	return errs
}

func validateBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if b.Spec.MatchResources != nil {
		errs = append(errs, validateMatchResources(b.Spec.MatchResources, spec.Child("matchResources"), false)...)
	}
	if r := b.Spec.ParamRef; r != nil {
		p := spec.Child("paramRef")
		if r.Name != "" && r.Selector != nil {
			errs = append(errs, field.Forbidden(p.Child("name"), "name and selector are mutually exclusive"))
		}
		if r.Name == "" && r.Selector == nil {
			errs = append(errs, field.Required(p, "one of name or selector must be specified"))
		}
		if r.Selector != nil {
			if _, err := metav1.LabelSelectorAsSelector(r.Selector); err != nil {
				errs = append(errs, field.Invalid(p.Child("selector"), r.Selector, err.Error()))
			}
		}
		switch *r.ParameterNotFoundAction {
		case admissionregistrationv1.AllowAction, admissionregistrationv1.DenyAction:
		default:
			errs = append(errs, field.NotSupported(p.Child("parameterNotFoundAction"), *r.ParameterNotFoundAction, []string{"Allow", "Deny"}))
		}
	}
	return errs
}

var allowedOperations = []string{"*", "CONNECT", "CREATE", "UPDATE"}

func validateMatchResources(m *admissionregistrationv1.MatchResources, p *field.Path, isPolicy bool) field.ErrorList {
	var errs field.ErrorList
	switch *m.MatchPolicy {
	case admissionregistrationv1.Exact, admissionregistrationv1.Equivalent:
	default:
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *m.MatchPolicy, []string{"Equivalent", "Exact"}))
	}
	if _, err := metav1.LabelSelectorAsSelector(m.NamespaceSelector); err != nil {
		errs = append(errs, field.Invalid(p.Child("namespaceSelector"), m.NamespaceSelector, err.Error()))
	}
	if _, err := metav1.LabelSelectorAsSelector(m.ObjectSelector); err != nil {
		errs = append(errs, field.Invalid(p.Child("objectSelector"), m.ObjectSelector, err.Error()))
	}
	if isPolicy && len(m.ResourceRules) == 0 {
		errs = append(errs, field.Required(p.Child("resourceRules"), ""))
	}
	for name, rules := range map[string][]admissionregistrationv1.NamedRuleWithOperations{"resourceRules": m.ResourceRules, "excludeResourceRules": m.ExcludeResourceRules} {
		for i, r := range rules {
			rp := p.Child(name).Index(i)
			if len(r.Operations) == 0 {
				errs = append(errs, field.Required(rp.Child("operations"), ""))
			}
			for j, op := range r.Operations {
				if !contains(allowedOperations, string(op)) {
					errs = append(errs, field.NotSupported(rp.Child("operations").Index(j), op, allowedOperations))
				}
			}
			if len(r.APIGroups) == 0 {
				errs = append(errs, field.Required(rp.Child("apiGroups"), ""))
			}
			if len(r.APIVersions) == 0 {
				errs = append(errs, field.Required(rp.Child("apiVersions"), ""))
			}
			if len(r.Resources) == 0 {
				errs = append(errs, field.Required(rp.Child("resources"), ""))
			}
			switch *r.Scope {
			case admissionregistrationv1.AllScopes, admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope:
			default:
				errs = append(errs, field.NotSupported(rp.Child("scope"), *r.Scope, []string{"*", "Cluster", "Namespaced"}))
			}
		}
	}
	return errs
}
