package engine

import (
	"bytes"
	"encoding/json"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validate/content"
	objectmetavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

// RBAC holds the rbac.authorization.k8s.io/v1 objects of the settings'
// "rbac" key: what a cluster's RBAC authorizer would read. The CEL
// `authorizer` answers from them (see newAuthorizer). Each object has been
// defaulted and validated as the apiserver would on create.
type RBAC struct {
	Roles               []*rbacv1.Role
	ClusterRoles        []*rbacv1.ClusterRole
	RoleBindings        []*rbacv1.RoleBinding
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// rbacKeys are the keys of the settings' "rbac" object.
const rbacKeys = "roles, clusterRoles, roleBindings, clusterRoleBindings"

type rawRBAC struct {
	Roles               []json.RawMessage `json:"roles,omitempty"`
	ClusterRoles        []json.RawMessage `json:"clusterRoles,omitempty"`
	RoleBindings        []json.RawMessage `json:"roleBindings,omitempty"`
	ClusterRoleBindings []json.RawMessage `json:"clusterRoleBindings,omitempty"`
}

// decodeRBAC decodes the settings' "rbac" object. It returns nil for an
// absent or null value (no RBAC: the authorizer then has no opinion, except
// for system:masters).
func decodeRBAC(data json.RawMessage) (*RBAC, error) {
	if isNull(data) {
		return nil, nil
	}
	if t := bytes.TrimSpace(data); t[0] != '{' {
		return nil, fmt.Errorf("%w: rbac: must be an object with the lists %s", ErrInvalidSettings, rbacKeys)
	}
	var raw rawRBAC
	strictErrs, err := sigsjson.UnmarshalStrict(data, &raw)
	if err != nil {
		return nil, fmt.Errorf("%w: rbac: %v", ErrInvalidSettings, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%w: rbac: %v (known keys: %s)", ErrInvalidSettings, joinErrs(strictErrs), rbacKeys)
	}
	root := field.NewPath("rbac")
	var errs []error
	seen := map[string]bool{} // "kind/namespace/name", for duplicates
	validateRules := func(rules []rbacv1.PolicyRule, namespaced bool, p *field.Path) (e field.ErrorList) {
		for j, rule := range rules {
			e = append(e, validatePolicyRule(rule, namespaced, p.Child("rules").Index(j))...)
		}
		return e
	}
	validateSubjects := func(subjects []rbacv1.Subject, namespaced bool, p *field.Path) (e field.ErrorList) {
		for j, s := range subjects {
			e = append(e, validateSubject(s, namespaced, p.Child("subjects").Index(j))...)
		}
		return e
	}
	r := &RBAC{
		Roles: decodeRBACList(raw.Roles, root.Child("roles"), "Role", true, seen, &errs, func(o *rbacv1.Role, p *field.Path) field.ErrorList {
			return validateRules(o.Rules, true, p)
		}),
		ClusterRoles: decodeRBACList(raw.ClusterRoles, root.Child("clusterRoles"), "ClusterRole", false, seen, &errs, func(o *rbacv1.ClusterRole, p *field.Path) field.ErrorList {
			e := validateRules(o.Rules, false, p)
			if ar := o.AggregationRule; ar != nil {
				sp := p.Child("aggregationRule", "clusterRoleSelectors")
				if len(ar.ClusterRoleSelectors) == 0 {
					e = append(e, field.Required(sp, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
				}
				for j := range ar.ClusterRoleSelectors {
					sel := &ar.ClusterRoleSelectors[j]
					e = append(e, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, sp.Index(j))...)
					if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
						// The apiserver reports the (nil) result of the conversion: "Invalid value: null".
						e = append(e, field.Invalid(sp.Index(j), nil, "invalid label selector."))
					}
				}
			}
			return e
		}),
		RoleBindings: decodeRBACList(raw.RoleBindings, root.Child("roleBindings"), "RoleBinding", true, seen, &errs, func(o *rbacv1.RoleBinding, p *field.Path) field.ErrorList {
			defaultRoleRef(&o.RoleRef)
			defaultSubjects(o.Subjects)
			e := validateRoleRef(o.RoleRef, []string{"Role", "ClusterRole"}, p.Child("roleRef"))
			return append(e, validateSubjects(o.Subjects, true, p)...)
		}),
		ClusterRoleBindings: decodeRBACList(raw.ClusterRoleBindings, root.Child("clusterRoleBindings"), "ClusterRoleBinding", false, seen, &errs, func(o *rbacv1.ClusterRoleBinding, p *field.Path) field.ErrorList {
			defaultRoleRef(&o.RoleRef)
			defaultSubjects(o.Subjects)
			e := validateRoleRef(o.RoleRef, []string{"ClusterRole"}, p.Child("roleRef"))
			return append(e, validateSubjects(o.Subjects, false, p)...)
		}),
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSettings, utilerrors.NewAggregate(errs))
	}
	return r, nil
}

// rbacObject is what decodeRBACList needs of an RBAC object type.
type rbacObject[T any] interface {
	*T
	metav1.Object
	SetGroupVersionKind(gvk schema.GroupVersionKind)
}

// decodeRBACList decodes, defaults and validates one list of the "rbac"
// object, as the apiserver would on create: the object's metadata (a
// cluster-scoped object's namespace is cleared), then validate's checks of
// the kind (which may default fields first), then duplicates among valid
// objects. Errors are appended to errs; every decoded object is returned.
func decodeRBACList[T any, P rbacObject[T]](items []json.RawMessage, list *field.Path, kind string, namespaced bool, seen map[string]bool, errs *[]error, validate func(P, *field.Path) field.ErrorList) []P {
	var out []P
	for i, item := range items {
		p := list.Index(i)
		o := P(new(T))
		if e := decodeRBACObject(item, p, kind, o); e != nil {
			*errs = append(*errs, e)
			continue
		}
		if !namespaced {
			o.SetNamespace("") // the apiserver clears the namespace of a cluster-scoped object
		}
		e := validate(o, p)
		meta := objectmetavalidation.ValidateObjectMetaAccessor(o, namespaced, rbacName, p.Child("metadata"))
		e = append(meta, e...)
		if len(e) == 0 {
			key := kind + "/" + o.GetNamespace() + "/" + o.GetName()
			if seen[key] {
				id := o.GetName()
				if ns := o.GetNamespace(); ns != "" {
					id = ns + "/" + id
				}
				e = append(e, field.Duplicate(p.Child("metadata", "name"), id))
			}
			seen[key] = true
		}
		for _, fe := range e {
			*errs = append(*errs, fe)
		}
		out = append(out, o)
	}
	return out
}

// rbacGroupVersion is the only version accepted: v1beta1 and v1alpha1 are no
// longer served by Kubernetes (1.22 removed them).
const rbacGroupVersion = rbacv1.GroupName + "/v1"

// decodeRBACObject decodes one object of a list strictly. apiVersion and kind
// may be left out (the list says the kind); when given they must match.
func decodeRBACObject(data json.RawMessage, p *field.Path, kind string, into interface {
	SetGroupVersionKind(gvk schema.GroupVersionKind)
}) error {
	if isNull(data) || bytes.TrimSpace(data)[0] != '{' {
		return field.Invalid(p, string(data), "must be a "+kind+" object")
	}
	var hdr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &hdr); err != nil {
		return fmt.Errorf("%s: %v", p, err)
	}
	if hdr.APIVersion != "" && hdr.APIVersion != rbacGroupVersion {
		return field.NotSupported(p.Child("apiVersion"), hdr.APIVersion, []string{rbacGroupVersion})
	}
	if hdr.Kind != "" && hdr.Kind != kind {
		return field.NotSupported(p.Child("kind"), hdr.Kind, []string{kind})
	}
	strictErrs, err := sigsjson.UnmarshalStrict(data, into)
	if err != nil {
		return fmt.Errorf("%s: %v", p, err)
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("%s: %s", p, joinErrs(strictErrs))
	}
	into.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind(kind))
	return nil
}

// rbacName is the apiserver's name rule for RBAC objects: a valid path
// segment (not "." or "..", no "/" or "%").
func rbacName(name string, _ bool) []string { return apivalidation.IsPathSegmentName(name) }

// defaultRoleRef and defaultSubjects are the API defaults of rbac/v1.
func defaultRoleRef(r *rbacv1.RoleRef) {
	if r.APIGroup == "" {
		r.APIGroup = rbacv1.GroupName
	}
}

func defaultSubjects(subjects []rbacv1.Subject) {
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// validatePolicyRule is the apiserver's validation of a rule of a Role
// (namespaced) or ClusterRole.
func validatePolicyRule(rule rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rule.Verbs) == 0 {
		errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
	}
	if len(rule.NonResourceURLs) > 0 {
		if namespaced {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
		}
		if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
		}
		return errs
	}
	if len(rule.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	if len(rule.Resources) == 0 {
		errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
	}
	return errs
}

func validateRoleRef(r rbacv1.RoleRef, kinds []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(p.Child("apiGroup"), r.APIGroup, []string{rbacv1.GroupName}))
	}
	if !contains(kinds, r.Kind) {
		errs = append(errs, field.NotSupported(p.Child("kind"), r.Kind, kinds))
	}
	if r.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		for _, msg := range rbacName(r.Name, false) {
			errs = append(errs, field.Invalid(p.Child("name"), r.Name, msg))
		}
	}
	return errs
}

// validateSubject: a ServiceAccount subject of a ClusterRoleBinding
// (namespaced false) must name its namespace; one of a RoleBinding defaults to
// the binding's.
func validateSubject(s rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			for _, msg := range objectmetavalidation.ValidateServiceAccountName(s.Name, false) {
				errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
			}
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}
