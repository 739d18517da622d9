package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ErrInvalidSettings is wrapped by every error Decode and New return for bad settings.
var ErrInvalidSettings = errors.New("invalid settings")

// The API group of MutatingAdmissionPolicy; its three versions share one structure.
const group = "admissionregistration.k8s.io"

var supportedVersions = []string{group + "/v1", group + "/v1beta1", group + "/v1alpha1"}

// DefaultPolicyName is the name given to a policy written as a bare spec.
const DefaultPolicyName = "policy"

// Settings is the decoded, defaulted and validated form of the policy settings:
//
//	{"policy": MAP object or spec, "binding": binding object or spec (optional),
//	 "params": one object or a list (optional), "namespaces": Namespace objects (optional),
//	 "rbac": {"roles", "clusterRoles", "roleBindings", "clusterRoleBindings"} (optional)}
type Settings struct {
	Policy  *admissionregistrationv1.MutatingAdmissionPolicy
	Binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	// BindingGiven is false when the settings had no binding and one that binds
	// the policy to everything was made up.
	BindingGiven bool
	// Params are the candidate parameter objects (what a cluster would hold of paramKind).
	Params []*unstructured.Unstructured
	// Namespaces answer namespaceSelector and namespaceObject; a namespace not
	// listed is taken to exist with only the label kubernetes.io/metadata.name.
	Namespaces []*corev1.Namespace
	// RBAC are the RBAC objects the CEL authorizer answers from; nil when the
	// settings have none (the authorizer then allows only system:masters).
	RBAC *RBAC
	// FromCluster says that namespaces, params and the authorizer's decisions
	// come from the cluster, through the host's capabilities (the guest calls
	// Engine.WithCluster); the settings then have no params, namespaces or rbac.
	FromCluster bool
}

type rawSettings struct {
	Policy     json.RawMessage   `json:"policy"`
	Binding    json.RawMessage   `json:"binding,omitempty"`
	Params     json.RawMessage   `json:"params,omitempty"`
	Namespaces []json.RawMessage `json:"namespaces,omitempty"`
	RBAC       json.RawMessage   `json:"rbac,omitempty"`
	// FromCluster: see Settings.FromCluster.
	FromCluster bool `json:"fromCluster,omitempty"`
}

// Decode parses settings given as JSON or YAML, applies the API defaults of
// Kubernetes and validates the objects like the apiserver would on create
// (without compiling the expressions: New does that). Errors wrap ErrInvalidSettings
// and name the field at fault.
func Decode(data []byte) (*Settings, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) || bytes.Equal(data, []byte("{}")) {
		return nil, fmt.Errorf("%w: settings must contain a \"policy\" (a MutatingAdmissionPolicy object or its spec)", ErrInvalidSettings)
	}
	if data[0] != '{' {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("%w: settings are neither JSON nor YAML: %v", ErrInvalidSettings, err)
		}
		data = j
	}
	var raw rawSettings
	strictErrs, err := sigsjson.UnmarshalStrict(data, &raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSettings, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%w: %v (known keys: policy, binding, params, namespaces, rbac, fromCluster)", ErrInvalidSettings, joinErrs(strictErrs))
	}
	if isNull(raw.Policy) {
		return nil, fmt.Errorf("%w: settings must contain a \"policy\" (a MutatingAdmissionPolicy object or its spec)", ErrInvalidSettings)
	}
	if raw.FromCluster {
		var given []string
		for _, k := range []struct {
			name string
			raw  json.RawMessage
		}{{"params", raw.Params}, {"rbac", raw.RBAC}} {
			if !isNull(k.raw) {
				given = append(given, k.name)
			}
		}
		if len(raw.Namespaces) > 0 {
			given = append(given, "namespaces")
		}
		if len(given) > 0 {
			return nil, fmt.Errorf("%w: fromCluster: true reads params, namespaces and the authorizer's decisions from the cluster; "+
				"remove %s (or set fromCluster: false to use them offline)", ErrInvalidSettings, strings.Join(given, ", "))
		}
	}
	s := &Settings{FromCluster: raw.FromCluster}
	if s.Policy, err = decodePolicy(raw.Policy); err != nil {
		return nil, err
	}
	if isNull(raw.Binding) {
		s.Binding = &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: s.Policy.Name + "-binding"},
			Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: s.Policy.Name},
		}
	} else {
		s.BindingGiven = true
		if s.Binding, err = decodeBinding(raw.Binding, s.Policy.Name); err != nil {
			return nil, err
		}
	}
	if s.Params, err = decodeParams(raw.Params, s.Policy.Spec.ParamKind); err != nil {
		return nil, err
	}
	for i, n := range raw.Namespaces {
		ns := &corev1.Namespace{}
		if errs, err := sigsjson.UnmarshalStrict(n, ns); err != nil || len(errs) > 0 {
			return nil, fmt.Errorf("%w: namespaces[%d]: %v", ErrInvalidSettings, i, errors.Join(append(errs, err)...))
		}
		if ns.Name == "" {
			return nil, fmt.Errorf("%w: namespaces[%d].metadata.name: Required value", ErrInvalidSettings, i)
		}
		s.Namespaces = append(s.Namespaces, ns)
	}
	if s.RBAC, err = decodeRBAC(raw.RBAC); err != nil {
		return nil, err
	}
	return s, nil
}

func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func joinErrs(errs []error) string {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// typeHeader is what tells an object from a bare spec.
type typeHeader struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec"`
	Metadata   json.RawMessage `json:"metadata"`
}

// splitObject decodes data either as a whole object of kind wantKind (any of
// the supported versions) or as a bare spec, and returns the object form with
// apiVersion rewritten to v1 (the versions share one structure).
func splitObject(data []byte, what, wantKind string) ([]byte, error) {
	var hdr typeHeader
	if err := json.Unmarshal(data, &hdr); err != nil {
		return nil, fmt.Errorf("%w: %s: must be a %s object or its spec: %v", ErrInvalidSettings, what, wantKind, err)
	}
	if hdr.APIVersion == "" && hdr.Kind == "" && hdr.Spec == nil {
		// A bare spec, optionally with the object's metadata beside it.
		var spec map[string]json.RawMessage
		if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fmt.Errorf("%w: %s: must be a %s object or its spec: %v", ErrInvalidSettings, what, wantKind, err)
		}
		obj := map[string]json.RawMessage{
			"apiVersion": json.RawMessage(`"` + group + `/v1"`),
			"kind":       json.RawMessage(`"` + wantKind + `"`),
		}
		if md, ok := spec["metadata"]; ok {
			obj["metadata"] = md
			delete(spec, "metadata")
		}
		specJSON, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		obj["spec"] = specJSON
		return json.Marshal(obj)
	}
	if hdr.Kind != "" && hdr.Kind != wantKind {
		return nil, fmt.Errorf("%w: %s.kind: Unsupported value: %q: supported values: %q", ErrInvalidSettings, what, hdr.Kind, wantKind)
	}
	if hdr.APIVersion != "" && !contains(supportedVersions, hdr.APIVersion) {
		return nil, fmt.Errorf("%w: %s.apiVersion: Unsupported value: %q: supported values: %s", ErrInvalidSettings, what, hdr.APIVersion, quoteAll(supportedVersions))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidSettings, what, err)
	}
	m["apiVersion"] = json.RawMessage(`"` + group + `/v1"`)
	m["kind"] = json.RawMessage(`"` + wantKind + `"`)
	return json.Marshal(m)
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func decodePolicy(data []byte) (*admissionregistrationv1.MutatingAdmissionPolicy, error) {
	obj, err := splitObject(data, "policy", "MutatingAdmissionPolicy")
	if err != nil {
		return nil, err
	}
	p := &admissionregistrationv1.MutatingAdmissionPolicy{}
	strictErrs, err := sigsjson.UnmarshalStrict(obj, p)
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %v", ErrInvalidSettings, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%w: policy: %v", ErrInvalidSettings, joinErrs(strictErrs))
	}
	if p.Name == "" {
		p.Name = DefaultPolicyName
	}
	defaultPolicy(p)
	if errs := validatePolicy(p); len(errs) > 0 {
		return nil, fmt.Errorf("%w: MutatingAdmissionPolicy %q: %v", ErrInvalidSettings, p.Name, errs.ToAggregate())
	}
	return p, nil
}

func decodeBinding(data []byte, policyName string) (*admissionregistrationv1.MutatingAdmissionPolicyBinding, error) {
	obj, err := splitObject(data, "binding", "MutatingAdmissionPolicyBinding")
	if err != nil {
		return nil, err
	}
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	strictErrs, err := sigsjson.UnmarshalStrict(obj, b)
	if err != nil {
		return nil, fmt.Errorf("%w: binding: %v", ErrInvalidSettings, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%w: binding: %v", ErrInvalidSettings, joinErrs(strictErrs))
	}
	if b.Name == "" {
		b.Name = policyName + "-binding"
	}
	if b.Spec.PolicyName == "" {
		b.Spec.PolicyName = policyName
	}
	defaultBinding(b)
	errs := validateBinding(b)
	if b.Spec.PolicyName != policyName {
		errs = append(errs, field.Invalid(field.NewPath("spec", "policyName"), b.Spec.PolicyName,
			fmt.Sprintf("the binding must name the policy of these settings, %q", policyName)))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: MutatingAdmissionPolicyBinding %q: %v", ErrInvalidSettings, b.Name, errs.ToAggregate())
	}
	return b, nil
}

func decodeParams(data json.RawMessage, kind *admissionregistrationv1.ParamKind) ([]*unstructured.Unstructured, error) {
	if isNull(data) {
		return nil, nil
	}
	var list []map[string]any
	t := bytes.TrimSpace(data)
	if t[0] == '[' {
		if err := json.Unmarshal(t, &list); err != nil {
			return nil, fmt.Errorf("%w: params: must be an object or a list of objects: %v", ErrInvalidSettings, err)
		}
	} else {
		var one map[string]any
		if err := json.Unmarshal(t, &one); err != nil {
			return nil, fmt.Errorf("%w: params: must be an object or a list of objects: %v", ErrInvalidSettings, err)
		}
		list = []map[string]any{one}
	}
	var out []*unstructured.Unstructured
	for i, m := range list {
		if m == nil {
			return nil, fmt.Errorf("%w: params[%d]: must be an object", ErrInvalidSettings, i)
		}
		u := &unstructured.Unstructured{Object: m}
		if kind != nil {
			if u.GetAPIVersion() == "" {
				u.SetAPIVersion(kind.APIVersion)
			}
			if u.GetKind() == "" {
				u.SetKind(kind.Kind)
			}
		}
		if _, ok := m["metadata"].(map[string]any); !ok && m["metadata"] != nil {
			return nil, fmt.Errorf("%w: params[%d].metadata: must be an object", ErrInvalidSettings, i)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("%w: params[%d].metadata.name: Required value", ErrInvalidSettings, i)
		}
		out = append(out, u)
	}
	return out, nil
}

// defaultMatchResources applies SetDefaults_MatchResources and SetDefaults_Rule.
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
			}
		}
	}
}

func defaultPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

func defaultBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	defaultMatchResources(b.Spec.MatchResources)
	if b.Spec.ParamRef != nil && b.Spec.ParamRef.ParameterNotFoundAction == nil {
		b.Spec.ParamRef.ParameterNotFoundAction = ptr.To(admissionregistrationv1.DenyAction)
	}
}
