package jsonengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrInvalidSettings is wrapped by every error Compile returns for bad settings.
var ErrInvalidSettings = errors.New("invalid settings")

const group = "admissionregistration.k8s.io"

var supportedVersions = []string{group + "/v1", group + "/v1beta1", group + "/v1alpha1"}

// The settings' objects, as plain structures: the three API versions of
// MutatingAdmissionPolicy share one structure, so one decoding serves them.

type settings struct {
	Policy      policy
	Binding     binding
	Params      []map[string]any
	Namespaces  []map[string]any
	RBAC        *rbacObjects // nil without "rbac": the sandbox's authorizer
	HasParamRef bool
	// FromCluster: namespaces, params and the authorizer's decisions come
	// from the cluster (Engine.WithCluster); the settings have none of them.
	FromCluster bool
}

type policy struct {
	Name string
	Spec policySpec
}

type policySpec struct {
	ParamKind          *paramKind      `json:"paramKind"`
	MatchConstraints   *matchResources `json:"matchConstraints"`
	Variables          []namedExpr     `json:"variables"`
	Mutations          []mutation      `json:"mutations"`
	FailurePolicy      *string         `json:"failurePolicy"`
	MatchConditions    []namedExpr     `json:"matchConditions"`
	ReinvocationPolicy string          `json:"reinvocationPolicy"`
}

type paramKind struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type namedExpr struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

type mutation struct {
	PatchType          string `json:"patchType"`
	ApplyConfiguration *struct {
		Expression string `json:"expression"`
	} `json:"applyConfiguration"`
	JSONPatch *struct {
		Expression string `json:"expression"`
	} `json:"jsonPatch"`
}

type matchResources struct {
	NamespaceSelector    *labelSelector `json:"namespaceSelector"`
	ObjectSelector       *labelSelector `json:"objectSelector"`
	ResourceRules        []namedRule    `json:"resourceRules"`
	ExcludeResourceRules []namedRule    `json:"excludeResourceRules"`
	MatchPolicy          *string        `json:"matchPolicy"`
}

type namedRule struct {
	ResourceNames []string `json:"resourceNames"`
	Operations    []string `json:"operations"`
	APIGroups     []string `json:"apiGroups"`
	APIVersions   []string `json:"apiVersions"`
	Resources     []string `json:"resources"`
	Scope         *string  `json:"scope"`
}

type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

type binding struct {
	Name string
	Spec bindingSpec
}

type bindingSpec struct {
	PolicyName     string          `json:"policyName"`
	ParamRef       *paramRef       `json:"paramRef"`
	MatchResources *matchResources `json:"matchResources"`
}

type paramRef struct {
	Name                    string         `json:"name"`
	Namespace               string         `json:"namespace"`
	Selector                *labelSelector `json:"selector"`
	ParameterNotFoundAction *string        `json:"parameterNotFoundAction"`
}

type rawSettings struct {
	Policy      json.RawMessage   `json:"policy"`
	Binding     json.RawMessage   `json:"binding"`
	Params      json.RawMessage   `json:"params"`
	Namespaces  []json.RawMessage `json:"namespaces"`
	RBAC        json.RawMessage   `json:"rbac"`
	FromCluster bool              `json:"fromCluster"`
}

// decodeSettings parses settings given as JSON or YAML and applies the API
// defaults of Kubernetes.
func decodeSettings(data []byte) (*settings, error) {
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
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSettings, err)
	}
	if isNull(raw.Policy) {
		return nil, fmt.Errorf("%w: settings must contain a \"policy\" (a MutatingAdmissionPolicy object or its spec)", ErrInvalidSettings)
	}
	if raw.FromCluster {
		var given []string
		if !isNull(raw.Params) {
			given = append(given, "params")
		}
		if !isNull(raw.RBAC) {
			given = append(given, "rbac")
		}
		if len(raw.Namespaces) > 0 {
			given = append(given, "namespaces")
		}
		if len(given) > 0 {
			return nil, fmt.Errorf("%w: fromCluster: true reads params, namespaces and the authorizer's decisions from the cluster; "+
				"remove %s (or set fromCluster: false to use them offline)", ErrInvalidSettings, strings.Join(given, ", "))
		}
	}
	s := &settings{FromCluster: raw.FromCluster}
	rbac, err := decodeRBAC(raw.RBAC)
	if err != nil {
		return nil, err
	}
	s.RBAC = rbac
	name, spec, err := splitObject(raw.Policy, "policy", "MutatingAdmissionPolicy")
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = "policy"
	}
	s.Policy.Name = name
	if err := json.Unmarshal(spec, &s.Policy.Spec); err != nil {
		return nil, fmt.Errorf("%w: policy: %v", ErrInvalidSettings, err)
	}
	if s.Policy.Spec.FailurePolicy == nil {
		fail := "Fail"
		s.Policy.Spec.FailurePolicy = &fail
	}
	defaultMatchResources(s.Policy.Spec.MatchConstraints)
	if len(s.Policy.Spec.Mutations) == 0 {
		return nil, fmt.Errorf("%w: MutatingAdmissionPolicy %q: spec.mutations: Required value", ErrInvalidSettings, name)
	}
	if s.Policy.Spec.MatchConstraints == nil {
		return nil, fmt.Errorf("%w: MutatingAdmissionPolicy %q: spec.matchConstraints: Required value", ErrInvalidSettings, name)
	}

	if isNull(raw.Binding) {
		s.Binding = binding{Name: name + "-binding", Spec: bindingSpec{PolicyName: name}}
	} else {
		bname, bspec, err := splitObject(raw.Binding, "binding", "MutatingAdmissionPolicyBinding")
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(bspec, &s.Binding.Spec); err != nil {
			return nil, fmt.Errorf("%w: binding: %v", ErrInvalidSettings, err)
		}
		if bname == "" {
			bname = name + "-binding"
		}
		s.Binding.Name = bname
		if s.Binding.Spec.PolicyName == "" {
			s.Binding.Spec.PolicyName = name
		}
		if s.Binding.Spec.PolicyName != name {
			return nil, fmt.Errorf("%w: MutatingAdmissionPolicyBinding %q: spec.policyName: Invalid value: %q: the binding must name the policy of these settings, %q", ErrInvalidSettings, bname, s.Binding.Spec.PolicyName, name)
		}
		defaultMatchResources(s.Binding.Spec.MatchResources)
		if r := s.Binding.Spec.ParamRef; r != nil && r.ParameterNotFoundAction == nil {
			deny := "Deny"
			r.ParameterNotFoundAction = &deny
		}
	}
	if s.Params, err = decodeParams(raw.Params, s.Policy.Spec.ParamKind); err != nil {
		return nil, err
	}
	for i, n := range raw.Namespaces {
		var ns map[string]any
		if err := json.Unmarshal(n, &ns); err != nil || ns == nil {
			return nil, fmt.Errorf("%w: namespaces[%d]: must be a Namespace object", ErrInvalidSettings, i)
		}
		if str(get(ns, "metadata", "name")) == "" {
			return nil, fmt.Errorf("%w: namespaces[%d].metadata.name: Required value", ErrInvalidSettings, i)
		}
		s.Namespaces = append(s.Namespaces, ns)
	}
	return s, nil
}

func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// splitObject reads data either as a whole object of kind wantKind (any of
// the supported versions) or as a bare spec (optionally with the object's
// metadata beside it), and returns the object's name and its spec.
func splitObject(data []byte, what, wantKind string) (string, json.RawMessage, error) {
	var hdr struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Spec       json.RawMessage `json:"spec"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &hdr); err != nil {
		return "", nil, fmt.Errorf("%w: %s: must be a %s object or its spec: %v", ErrInvalidSettings, what, wantKind, err)
	}
	if hdr.APIVersion == "" && hdr.Kind == "" && hdr.Spec == nil {
		return hdr.Metadata.Name, data, nil
	}
	if hdr.Kind != "" && hdr.Kind != wantKind {
		return "", nil, fmt.Errorf("%w: %s.kind: Unsupported value: %q: supported values: %q", ErrInvalidSettings, what, hdr.Kind, wantKind)
	}
	if hdr.APIVersion != "" {
		ok := false
		for _, v := range supportedVersions {
			ok = ok || v == hdr.APIVersion
		}
		if !ok {
			q := make([]string, len(supportedVersions))
			for i, v := range supportedVersions {
				q[i] = fmt.Sprintf("%q", v)
			}
			return "", nil, fmt.Errorf("%w: %s.apiVersion: Unsupported value: %q: supported values: %s", ErrInvalidSettings, what, hdr.APIVersion, strings.Join(q, ", "))
		}
	}
	return hdr.Metadata.Name, hdr.Spec, nil
}

func decodeParams(data json.RawMessage, kind *paramKind) ([]map[string]any, error) {
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
	for i, m := range list {
		if m == nil {
			return nil, fmt.Errorf("%w: params[%d]: must be an object", ErrInvalidSettings, i)
		}
		if _, ok := m["metadata"].(map[string]any); !ok && m["metadata"] != nil {
			return nil, fmt.Errorf("%w: params[%d].metadata: must be an object", ErrInvalidSettings, i)
		}
		if kind != nil {
			if str(m["apiVersion"]) == "" {
				m["apiVersion"] = kind.APIVersion
			}
			if str(m["kind"]) == "" {
				m["kind"] = kind.Kind
			}
		}
		if str(get(m, "metadata", "name")) == "" {
			return nil, fmt.Errorf("%w: params[%d].metadata.name: Required value", ErrInvalidSettings, i)
		}
	}
	return list, nil
}

// defaultMatchResources applies SetDefaults_MatchResources and SetDefaults_Rule.
func defaultMatchResources(m *matchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		eq := "Equivalent"
		m.MatchPolicy = &eq
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &labelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &labelSelector{}
	}
	for _, rules := range [][]namedRule{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				all := "*"
				rules[i].Scope = &all
			}
		}
	}
}

// get walks nested JSON objects; nil when a step is missing or not an object.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}
