package jsonengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	vfield "k8s.io/apimachinery/pkg/util/validation/field"
)

// The RBAC objects of the settings' "rbac" key and the authorizer that
// answers CEL's `authorizer` from them: package engine's (authorizer.go,
// rbac.go: the apiserver's privileged-group authorizer, then Kubernetes' RBAC
// authorizer over these objects, or the sandbox's "no opinion" without them)
// on plain structures instead of client-go's rbac/v1 types, which TinyGo
// cannot build. The decisions and reasons are package engine's
// (TestAuthorizerAgainstEngine); test/rbacdiff compares package engine's with
// Kubernetes' own.

const (
	rbacGroup        = "rbac.authorization.k8s.io"
	rbacGroupVersion = rbacGroup + "/v1"
	rbacKeys         = "roles, clusterRoles, roleBindings, clusterRoleBindings"
)

type objectMeta struct {
	Name         string            `json:"name"`
	GenerateName string            `json:"generateName"`
	Namespace    string            `json:"namespace"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
}

type policyRule struct {
	Verbs           []string `json:"verbs"`
	APIGroups       []string `json:"apiGroups"`
	Resources       []string `json:"resources"`
	ResourceNames   []string `json:"resourceNames"`
	NonResourceURLs []string `json:"nonResourceURLs"`
}

type rbacRole struct {
	Metadata        objectMeta   `json:"metadata"`
	Rules           []policyRule `json:"rules"`
	AggregationRule *struct {
		ClusterRoleSelectors []labelSelector `json:"clusterRoleSelectors"`
	} `json:"aggregationRule"`
}

type subject struct {
	Kind      string `json:"kind"`
	APIGroup  string `json:"apiGroup"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type roleRef struct {
	APIGroup string `json:"apiGroup"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

type rbacBinding struct {
	Metadata objectMeta `json:"metadata"`
	Subjects []subject  `json:"subjects"`
	RoleRef  roleRef    `json:"roleRef"`
}

type rbacObjects struct {
	Roles               []*rbacRole
	ClusterRoles        []*rbacRole
	RoleBindings        []*rbacBinding
	ClusterRoleBindings []*rbacBinding
}

// decodeRBAC decodes, defaults and validates the settings' "rbac" object as
// package engine does (nil for an absent or null value).
func decodeRBAC(data json.RawMessage) (*rbacObjects, error) {
	if isNull(data) {
		return nil, nil
	}
	if bytes.TrimSpace(data)[0] != '{' {
		return nil, fmt.Errorf("%w: rbac: must be an object with the lists %s", ErrInvalidSettings, rbacKeys)
	}
	var raw struct {
		Roles               []json.RawMessage `json:"roles"`
		ClusterRoles        []json.RawMessage `json:"clusterRoles"`
		RoleBindings        []json.RawMessage `json:"roleBindings"`
		ClusterRoleBindings []json.RawMessage `json:"clusterRoleBindings"`
	}
	if err := strictUnmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: rbac: %v (known keys: %s)", ErrInvalidSettings, err, rbacKeys)
	}
	root := vfield.NewPath("rbac")
	var errs []error
	seen := map[string]bool{}
	r := &rbacObjects{}
	for i, item := range raw.Roles {
		o := &rbacRole{}
		p := root.Child("roles").Index(i)
		if decodeRBACObject(item, p, "Role", o, &o.Metadata, &errs) {
			e := validateRules(o.Rules, true, p)
			validated(&o.Metadata, true, "Role", p, e, seen, &errs)
			r.Roles = append(r.Roles, o)
		}
	}
	for i, item := range raw.ClusterRoles {
		o := &rbacRole{}
		p := root.Child("clusterRoles").Index(i)
		if decodeRBACObject(item, p, "ClusterRole", o, &o.Metadata, &errs) {
			o.Metadata.Namespace = "" // the apiserver clears the namespace of a cluster-scoped object
			e := validateRules(o.Rules, false, p)
			if ar := o.AggregationRule; ar != nil {
				sp := p.Child("aggregationRule", "clusterRoleSelectors")
				if len(ar.ClusterRoleSelectors) == 0 {
					e = append(e, vfield.Required(sp, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
				}
				for j := range ar.ClusterRoleSelectors {
					se := validateLabelSelector(&ar.ClusterRoleSelectors[j], sp.Index(j))
					e = append(e, se...)
					if len(se) > 0 {
						// LabelSelectorAsSelector fails on what validation refuses; the
						// apiserver reports its (nil) result: "Invalid value: null".
						e = append(e, vfield.Invalid(sp.Index(j), nil, "invalid label selector."))
					}
				}
			}
			validated(&o.Metadata, false, "ClusterRole", p, e, seen, &errs)
			r.ClusterRoles = append(r.ClusterRoles, o)
		}
	}
	for i, item := range raw.RoleBindings {
		o := &rbacBinding{}
		p := root.Child("roleBindings").Index(i)
		if decodeRBACObject(item, p, "RoleBinding", o, &o.Metadata, &errs) {
			defaultBinding(o)
			e := validateRoleRef(o.RoleRef, []string{"Role", "ClusterRole"}, p.Child("roleRef"))
			e = append(e, validateSubjects(o.Subjects, true, p)...)
			validated(&o.Metadata, true, "RoleBinding", p, e, seen, &errs)
			r.RoleBindings = append(r.RoleBindings, o)
		}
	}
	for i, item := range raw.ClusterRoleBindings {
		o := &rbacBinding{}
		p := root.Child("clusterRoleBindings").Index(i)
		if decodeRBACObject(item, p, "ClusterRoleBinding", o, &o.Metadata, &errs) {
			o.Metadata.Namespace = ""
			defaultBinding(o)
			e := validateRoleRef(o.RoleRef, []string{"ClusterRole"}, p.Child("roleRef"))
			e = append(e, validateSubjects(o.Subjects, false, p)...)
			validated(&o.Metadata, false, "ClusterRoleBinding", p, e, seen, &errs)
			r.ClusterRoleBindings = append(r.ClusterRoleBindings, o)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSettings, utilerrors.NewAggregate(errs))
	}
	return r, nil
}

// strictUnmarshal decodes JSON refusing unknown fields, with the message
// sigs.k8s.io/json gives for them (package engine's decoder).
func strictUnmarshal(data []byte, into any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(into); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// decodeRBACObject decodes one object of a list strictly. apiVersion and kind
// may be left out (the list says the kind); when given they must match.
func decodeRBACObject(data json.RawMessage, p *vfield.Path, kind string, into any, meta *objectMeta, errs *[]error) bool {
	if isNull(data) || bytes.TrimSpace(data)[0] != '{' {
		*errs = append(*errs, vfield.Invalid(p, string(data), "must be a "+kind+" object"))
		return false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %v", p, err))
		return false
	}
	var hdr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &hdr); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %v", p, err))
		return false
	}
	if hdr.APIVersion != "" && hdr.APIVersion != rbacGroupVersion {
		*errs = append(*errs, vfield.NotSupported(p.Child("apiVersion"), hdr.APIVersion, []string{rbacGroupVersion}))
		return false
	}
	if hdr.Kind != "" && hdr.Kind != kind {
		*errs = append(*errs, vfield.NotSupported(p.Child("kind"), hdr.Kind, []string{kind}))
		return false
	}
	// The object's metadata may hold any of ObjectMeta's fields; the rest is strict.
	delete(obj, "apiVersion")
	delete(obj, "kind")
	rawMeta := obj["metadata"]
	delete(obj, "metadata")
	rest, _ := json.Marshal(obj)
	if err := strictUnmarshal(rest, into); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %v", p, err))
		return false
	}
	if !isNull(rawMeta) {
		if err := json.Unmarshal(rawMeta, meta); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %v", p.Child("metadata"), err))
			return false
		}
	}
	return true
}

// validated appends an object's errors to errs: its metadata's (as the
// apiserver validates ObjectMeta: name, namespace, labels, annotation keys),
// then e, then a duplicate among valid objects.
func validated(m *objectMeta, namespaced bool, kind string, p *vfield.Path, e vfield.ErrorList, seen map[string]bool, errs *[]error) {
	all := validateObjectMeta(m, namespaced, p.Child("metadata"))
	all = append(all, e...)
	if len(all) == 0 {
		key := kind + "/" + m.Namespace + "/" + m.Name
		if seen[key] {
			id := m.Name
			if m.Namespace != "" {
				id = m.Namespace + "/" + id
			}
			all = append(all, vfield.Duplicate(p.Child("metadata", "name"), id))
		}
		seen[key] = true
	}
	for _, fe := range all {
		*errs = append(*errs, fe)
	}
}

func validateObjectMeta(m *objectMeta, namespaced bool, p *vfield.Path) vfield.ErrorList {
	var errs vfield.ErrorList
	if m.GenerateName != "" {
		for _, msg := range content.IsPathSegmentName(m.GenerateName) {
			errs = append(errs, vfield.Invalid(p.Child("generateName"), m.GenerateName, msg))
		}
	}
	if m.Name == "" {
		errs = append(errs, vfield.Required(p.Child("name"), "name or generateName is required"))
	} else {
		for _, msg := range content.IsPathSegmentName(m.Name) {
			errs = append(errs, vfield.Invalid(p.Child("name"), m.Name, msg))
		}
	}
	if namespaced {
		if m.Namespace == "" {
			errs = append(errs, vfield.Required(p.Child("namespace"), ""))
		} else {
			for _, msg := range content.IsDNS1123Label(m.Namespace) {
				errs = append(errs, vfield.Invalid(p.Child("namespace"), m.Namespace, msg))
			}
		}
	}
	errs = append(errs, validateLabels(m.Labels, p.Child("labels"))...)
	for _, k := range sortedKeys(m.Annotations) {
		for _, msg := range content.IsLabelKey(strings.ToLower(k)) {
			errs = append(errs, vfield.Invalid(p.Child("annotations"), k, msg).WithOrigin("format=k8s-label-key"))
		}
	}
	return errs
}

// validateLabels is apimachinery's ValidateLabels (keys in order here).
func validateLabels(labels map[string]string, p *vfield.Path) vfield.ErrorList {
	var errs vfield.ErrorList
	for _, k := range sortedKeys(labels) {
		for _, msg := range content.IsLabelKey(k) {
			errs = append(errs, vfield.Invalid(p, k, msg).WithOrigin("format=k8s-label-key"))
		}
		for _, msg := range content.IsLabelValue(labels[k]) {
			errs = append(errs, vfield.Invalid(p, labels[k], msg).WithOrigin("format=k8s-label-value"))
		}
	}
	return errs
}

// validateLabelSelector is apimachinery's ValidateLabelSelector with the
// default options.
func validateLabelSelector(sel *labelSelector, p *vfield.Path) vfield.ErrorList {
	errs := validateLabels(sel.MatchLabels, p.Child("matchLabels"))
	for i, x := range sel.MatchExpressions {
		xp := p.Child("matchExpressions").Index(i)
		switch x.Operator {
		case "In", "NotIn":
			if len(x.Values) == 0 {
				errs = append(errs, vfield.Required(xp.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
			}
		case "Exists", "DoesNotExist":
			if len(x.Values) > 0 {
				errs = append(errs, vfield.Forbidden(xp.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		default:
			errs = append(errs, vfield.Invalid(xp.Child("operator"), x.Operator, "not a valid selector operator"))
		}
		for _, msg := range content.IsLabelKey(x.Key) {
			errs = append(errs, vfield.Invalid(xp.Child("key"), x.Key, msg).WithOrigin("format=k8s-label-key"))
		}
		for j, v := range x.Values {
			for _, msg := range content.IsLabelValue(v) {
				errs = append(errs, vfield.Invalid(xp.Child("values").Index(j), v, msg))
			}
		}
	}
	return errs
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func validateRules(rules []policyRule, namespaced bool, p *vfield.Path) vfield.ErrorList {
	var errs vfield.ErrorList
	for j, rule := range rules {
		rp := p.Child("rules").Index(j)
		if len(rule.Verbs) == 0 {
			errs = append(errs, vfield.Required(rp.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(rule.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, vfield.Invalid(rp.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
				errs = append(errs, vfield.Invalid(rp.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(rule.APIGroups) == 0 {
			errs = append(errs, vfield.Required(rp.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(rule.Resources) == 0 {
			errs = append(errs, vfield.Required(rp.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

// defaultBinding applies rbac/v1's API defaults to a binding.
func defaultBinding(b *rbacBinding) {
	if b.RoleRef.APIGroup == "" {
		b.RoleRef.APIGroup = rbacGroup
	}
	for i := range b.Subjects {
		s := &b.Subjects[i]
		if s.APIGroup == "" && (s.Kind == "User" || s.Kind == "Group") {
			s.APIGroup = rbacGroup
		}
	}
}

func validateRoleRef(r roleRef, kinds []string, p *vfield.Path) vfield.ErrorList {
	var errs vfield.ErrorList
	if r.APIGroup != rbacGroup {
		errs = append(errs, vfield.NotSupported(p.Child("apiGroup"), r.APIGroup, []string{rbacGroup}))
	}
	if !contains(kinds, r.Kind) {
		errs = append(errs, vfield.NotSupported(p.Child("kind"), r.Kind, kinds))
	}
	if r.Name == "" {
		errs = append(errs, vfield.Required(p.Child("name"), ""))
	} else {
		for _, msg := range content.IsPathSegmentName(r.Name) {
			errs = append(errs, vfield.Invalid(p.Child("name"), r.Name, msg))
		}
	}
	return errs
}

// validateSubjects: a ServiceAccount subject of a ClusterRoleBinding
// (namespaced false) must name its namespace; one of a RoleBinding defaults to
// the binding's.
func validateSubjects(subjects []subject, namespaced bool, p *vfield.Path) vfield.ErrorList {
	var errs vfield.ErrorList
	for j, s := range subjects {
		sp := p.Child("subjects").Index(j)
		if s.Name == "" {
			errs = append(errs, vfield.Required(sp.Child("name"), ""))
		}
		switch s.Kind {
		case "ServiceAccount":
			if s.Name != "" {
				for _, msg := range content.IsDNS1123Subdomain(s.Name) {
					errs = append(errs, vfield.Invalid(sp.Child("name"), s.Name, msg))
				}
			}
			if s.APIGroup != "" {
				errs = append(errs, vfield.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, vfield.Required(sp.Child("namespace"), ""))
			}
		case "User", "Group":
			if s.APIGroup != rbacGroup {
				errs = append(errs, vfield.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{rbacGroup}))
			}
		default:
			errs = append(errs, vfield.NotSupported(sp.Child("kind"), s.Kind, []string{"ServiceAccount", "User", "Group"}))
		}
	}
	return errs
}

// The authorizer.

// userInfo is the user a check is made for: the request's, or a service
// account's (authorizer.serviceAccount).
type userInfo struct {
	name   string
	groups []string
}

// authzAttributes are the attributes of one check, as the CEL authz library
// builds them (authorizer.AttributesRecord).
type authzAttributes struct {
	user             *userInfo
	verb             string
	resourceRequest  bool
	path             string // a non-resource request's
	apiGroup         string
	resource         string
	subresource      string
	namespace, name  string
	fieldSelector    string // carried, never read: RBAC does not look at selectors
	labelSelector    string
	apiVersionIsStar bool
}

// decision is the authorizer's answer (the apiserver's authorizer.Decision).
type decision = Decision

// Decision is an authorizer's decision, as k8s.io/apiserver's
// authorizer.Decision: deny, allow or no opinion.
type Decision int

const (
	DecisionDeny Decision = iota
	DecisionAllow
	DecisionNoOpinion
)

const (
	decisionNoOpinion = DecisionNoOpinion
	decisionAllow     = DecisionAllow
)

// authorizerFunc answers a check: a decision, its reason and an error (the
// privileged-group and RBAC authorizers give none for a request with a user;
// a cluster's may, see Cluster).
type authorizerFunc func(a *authzAttributes) (decision, string, error)

// newAuthorizer is package engine's union of the privileged-group authorizer
// (system:masters is allowed everything) and the RBAC authorizer over r, or
// the sandbox authorizer when the settings have no "rbac".
func newAuthorizer(r *rbacObjects) authorizerFunc {
	second := func(*authzAttributes) (decision, string) {
		return decisionNoOpinion, "tollgate: the policy sandbox has no authorizer"
	}
	if r != nil {
		second = newRBACAuthorizer(r).authorize
	}
	return func(a *authzAttributes) (decision, string, error) {
		if contains(a.user.groups, "system:masters") {
			return decisionAllow, "", nil
		}
		d, reason := second(a)
		return d, reason, nil
	}
}

type rbacAuthorizer struct {
	clusterRoleBindings []resolvedBinding
	roleBindings        map[string][]resolvedBinding // by namespace
}

// resolvedBinding is a RoleBinding or ClusterRoleBinding with its role's
// rules and its "allowed by" reasons.
type resolvedBinding struct {
	namespace string
	subjects  []subject
	reasons   []string // by subject
	rules     []policyRule
	err       error // the role does not exist
}

func newRBACAuthorizer(r *rbacObjects) *rbacAuthorizer {
	roles := map[string][]policyRule{}
	for _, role := range r.Roles {
		roles[role.Metadata.Namespace+"/"+role.Metadata.Name] = role.Rules
	}
	clusterRoles := aggregateClusterRoles(r.ClusterRoles)
	resolve := func(kind, name, namespace string, ref roleRef, subjects []subject) resolvedBinding {
		b := resolvedBinding{namespace: namespace, subjects: subjects, reasons: make([]string, len(subjects))}
		for i := range subjects {
			b.reasons[i] = fmt.Sprintf("RBAC: allowed by %s %q of %s %q to %s",
				kind, name, ref.Kind, ref.Name, describeSubject(&subjects[i], namespace))
		}
		switch ref.Kind {
		case "Role":
			rules, ok := roles[namespace+"/"+ref.Name]
			if !ok {
				b.err = fmt.Errorf("role.%s %q not found", rbacGroup, ref.Name)
			}
			b.rules = rules
		case "ClusterRole":
			rules, ok := clusterRoles[ref.Name]
			if !ok {
				b.err = fmt.Errorf("clusterrole.%s %q not found", rbacGroup, ref.Name)
			}
			b.rules = rules
		default:
			b.err = fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
		}
		return b
	}
	a := &rbacAuthorizer{roleBindings: map[string][]resolvedBinding{}}
	for _, b := range r.ClusterRoleBindings {
		a.clusterRoleBindings = append(a.clusterRoleBindings, resolve("ClusterRoleBinding", b.Metadata.Name, "", b.RoleRef, b.Subjects))
	}
	for _, b := range r.RoleBindings {
		ns := b.Metadata.Namespace
		a.roleBindings[ns] = append(a.roleBindings[ns], resolve("RoleBinding", b.Metadata.Name+"/"+ns, ns, b.RoleRef, b.Subjects))
	}
	return a
}

func (a *rbacAuthorizer) authorize(attrs *authzAttributes) (decision, string) {
	var errs []error
	if reason, ok := allowedBy(a.clusterRoleBindings, attrs, &errs); ok {
		return decisionAllow, reason
	}
	if attrs.namespace != "" {
		if reason, ok := allowedBy(a.roleBindings[attrs.namespace], attrs, &errs); ok {
			return decisionAllow, reason
		}
	}
	if len(errs) > 0 {
		return decisionNoOpinion, fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs))
	}
	return decisionNoOpinion, ""
}

func allowedBy(bindings []resolvedBinding, attrs *authzAttributes, errs *[]error) (string, bool) {
	for i := range bindings {
		b := &bindings[i]
		s, ok := appliesTo(attrs.user, b.subjects, b.namespace)
		if !ok {
			continue
		}
		if b.err != nil {
			*errs = append(*errs, b.err)
			continue
		}
		for j := range b.rules {
			if ruleAllows(attrs, &b.rules[j]) {
				return b.reasons[s], true
			}
		}
	}
	return "", false
}

const serviceAccountUsernamePrefix = "system:serviceaccount:"

func appliesTo(u *userInfo, subjects []subject, namespace string) (int, bool) {
	for i := range subjects {
		s := &subjects[i]
		switch s.Kind {
		case "User":
			if u.name == s.Name {
				return i, true
			}
		case "Group":
			if contains(u.groups, s.Name) {
				return i, true
			}
		case "ServiceAccount":
			ns := namespace
			if s.Namespace != "" {
				ns = s.Namespace
			}
			if ns != "" && u.name == serviceAccountUsernamePrefix+ns+":"+s.Name {
				return i, true
			}
		}
	}
	return 0, false
}

func describeSubject(s *subject, bindingNamespace string) string {
	if s.Kind == "ServiceAccount" {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNamespace
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// ruleAllows is RBAC's rule matching (see package engine's ruleAllows).
func ruleAllows(a *authzAttributes, rule *policyRule) bool {
	if !matchesWildcard(rule.Verbs, "*", a.verb) {
		return false
	}
	if !a.resourceRequest {
		for _, u := range rule.NonResourceURLs {
			if u == "*" || u == a.path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.path, strings.TrimRight(u, "*"))) {
				return true
			}
		}
		return false
	}
	if !matchesWildcard(rule.APIGroups, "*", a.apiGroup) {
		return false
	}
	combined := a.resource
	if a.subresource != "" {
		combined = a.resource + "/" + a.subresource
	}
	resourceOK := false
	for _, r := range rule.Resources {
		if r == "*" || r == combined || (a.subresource != "" && r == "*/"+a.subresource) {
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
	return contains(rule.ResourceNames, a.name)
}

func matchesWildcard(list []string, all, want string) bool {
	for _, v := range list {
		if v == all || v == want {
			return true
		}
	}
	return false
}

// aggregateClusterRoles is package engine's: an aggregated ClusterRole holds
// the rules of the ClusterRoles its selectors select (selectors in order,
// roles by name, equal rules once), to the fixed point.
func aggregateClusterRoles(roles []*rbacRole) map[string][]policyRule {
	rules := make(map[string][]policyRule, len(roles))
	sorted := make([]*rbacRole, len(roles))
	copy(sorted, roles)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Metadata.Name < sorted[j].Metadata.Name })
	type aggregated struct {
		name    string
		members []string
	}
	var agg []aggregated
	for _, r := range sorted {
		if r.AggregationRule == nil {
			rules[r.Metadata.Name] = r.Rules
			continue
		}
		rules[r.Metadata.Name] = nil
		a := aggregated{name: r.Metadata.Name}
		for i := range r.AggregationRule.ClusterRoleSelectors {
			sel, err := compileSelector(&r.AggregationRule.ClusterRoleSelectors[i])
			if err != nil {
				continue // refused by decodeRBAC
			}
			for _, m := range sorted {
				// An empty selector selects every role (LabelSelectorAsSelector).
				if m.Metadata.Name != r.Metadata.Name && sel.matches(m.Metadata.Labels) {
					a.members = append(a.members, m.Metadata.Name)
				}
			}
		}
		agg = append(agg, a)
	}
	for pass := 0; pass <= len(roles)*len(roles)+1; pass++ {
		changed := false
		for _, a := range agg {
			var next []policyRule
			for _, m := range a.members {
				for _, rule := range rules[m] {
					if !ruleExists(next, rule) {
						next = append(next, rule)
					}
				}
			}
			if !rulesEqual(next, rules[a.name]) {
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

// ruleEqual is apimachinery's semantic equality on rules: nil and empty
// lists are equal.
func ruleEqual(a, b *policyRule) bool {
	return stringsEqual(a.Verbs, b.Verbs) && stringsEqual(a.APIGroups, b.APIGroups) &&
		stringsEqual(a.Resources, b.Resources) && stringsEqual(a.ResourceNames, b.ResourceNames) &&
		stringsEqual(a.NonResourceURLs, b.NonResourceURLs)
}

func rulesEqual(a, b []policyRule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !ruleEqual(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

func ruleExists(list []policyRule, rule policyRule) bool {
	for i := range list {
		if ruleEqual(&list[i], &rule) {
			return true
		}
	}
	return false
}

func stringsEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
