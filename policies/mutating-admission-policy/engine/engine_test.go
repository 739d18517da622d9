package engine

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// req builds an admission request for obj (YAML); kind and resource are
// derived from the object for the kinds used in these tests.
type req struct {
	op        string
	object    string
	oldObject string
	namespace string
	// resource overrides the derived resource (e.g. "pods").
	resource string
}

var resources = map[string][3]string{ // kind -> group, version, resource
	"Pod":        {"", "v1", "pods"},
	"ConfigMap":  {"", "v1", "configmaps"},
	"Namespace":  {"", "v1", "namespaces"},
	"Deployment": {"apps", "v1", "deployments"},
	"Widget":     {"example.com", "v1", "widgets"},
}

func mustJSON(t testing.TB, y string) json.RawMessage {
	t.Helper()
	if strings.TrimSpace(y) == "" {
		return nil
	}
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("bad YAML in test: %v\n%s", err, y)
	}
	return j
}

func (r req) build(t testing.TB) *protocol.KubernetesAdmissionRequest {
	t.Helper()
	src := r.object
	if src == "" {
		src = r.oldObject
	}
	var hdr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(mustJSON(t, src), &hdr); err != nil {
		t.Fatal(err)
	}
	gvr, ok := resources[hdr.Kind]
	if !ok {
		t.Fatalf("test kind %q unknown", hdr.Kind)
	}
	if r.resource != "" {
		gvr[2] = r.resource
	}
	op := r.op
	if op == "" {
		op = "CREATE"
	}
	ns := hdr.Metadata.Namespace
	if r.namespace != "" {
		ns = r.namespace
	}
	return &protocol.KubernetesAdmissionRequest{
		UID:       "705ab4f5-6393-11e8-b7cc-42010a800002",
		Kind:      protocol.GroupVersionKind{Group: gvr[0], Version: gvr[1], Kind: hdr.Kind},
		Resource:  protocol.GroupVersionResource{Group: gvr[0], Version: gvr[1], Resource: gvr[2]},
		Name:      hdr.Metadata.Name,
		Namespace: ns,
		Operation: op,
		UserInfo:  protocol.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
		Object:    mustJSON(t, r.object),
		OldObject: mustJSON(t, r.oldObject),
	}
}

// want is the expected outcome: an unchanged object, a mutated object (YAML,
// compared as JSON values), or a rejection whose message contains reject.
type want struct {
	unchanged bool
	object    string
	reject    string
	code      int32
}

func check(t *testing.T, e *Engine, r req, w want) {
	t.Helper()
	res, err := e.Evaluate(context.Background(), r.build(t))
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	switch {
	case w.reject != "":
		if res.Accepted {
			t.Fatalf("accepted (object %s), want rejection containing %q", res.Object, w.reject)
		}
		if !strings.Contains(res.Message, w.reject) {
			t.Fatalf("rejection message\n  %s\nwant it to contain\n  %s", res.Message, w.reject)
		}
		code := w.code
		if code == 0 {
			code = 403
		}
		if res.Code != code {
			t.Fatalf("code %d, want %d", res.Code, code)
		}
	case w.unchanged:
		if !res.Accepted || res.Object != nil {
			t.Fatalf("want accepted and unchanged, got accepted=%v message=%q object=%s", res.Accepted, res.Message, res.Object)
		}
	default:
		if !res.Accepted {
			t.Fatalf("rejected: %s", res.Message)
		}
		if res.Object == nil {
			t.Fatalf("object unchanged, want\n%s", w.object)
		}
		var got, exp any
		if err := json.Unmarshal(res.Object, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(mustJSON(t, w.object), &exp); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, exp) {
			g, _ := yaml.JSONToYAML(res.Object)
			t.Fatalf("mutated object\n%s\nwant\n%s", g, w.object)
		}
	}
}

func compile(t *testing.T, settings string) *Engine {
	t.Helper()
	e, err := Compile([]byte(settings))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return e
}

func TestCompileOnce(t *testing.T) {
	e := compile(t, sidecarApply)
	if e.Settings().Policy.Name != "sidecar-policy.example.com" {
		t.Fatalf("policy name %q", e.Settings().Policy.Name)
	}
	if len(e.evaluator.patchers) != 1 {
		t.Fatalf("%d patchers", len(e.evaluator.patchers))
	}
}

func TestInvalidSettings(t *testing.T) {
	cases := []struct {
		name     string
		settings string
		want     []string
	}{
		{"empty", ``, []string{`"policy"`}},
		{"no policy", `{"binding": {}}`, []string{`"policy"`}},
		{"unknown key", `{"policy": {}, "polcy": 1}`, []string{`unknown field "polcy"`}},
		{"unknown spec field", `
policy:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  reinvocationPolicy: Never
  mutation: []
`, []string{`unknown field "spec.mutation"`}},
		{"wrong kind", `{"policy": {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "spec": {}}}`, []string{`policy.kind: Unsupported value: "ValidatingAdmissionPolicy"`}},
		{"wrong version", `{"policy": {"apiVersion": "admissionregistration.k8s.io/v2", "kind": "MutatingAdmissionPolicy", "spec": {}}}`, []string{`policy.apiVersion: Unsupported value`}},
		{"no mutations", `
policy:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  reinvocationPolicy: Never
`, []string{`spec.mutations: Required value`}},
		{"no reinvocationPolicy, DELETE, bad patchType", `
policy:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [DELETE], resources: [pods]}]}
  mutations: [{patchType: StrategicMerge}]
`, []string{`spec.reinvocationPolicy: Required value`, `spec.matchConstraints.resourceRules[0].operations[0]: Unsupported value: "DELETE"`, `spec.mutations[0].patchType: Unsupported value: "StrategicMerge"`}},
		{"no matchConstraints", `
policy:
  reinvocationPolicy: Never
  mutations: [{patchType: JSONPatch, jsonPatch: {expression: "[]"}}]
`, []string{`spec.matchConstraints: Required value`}},
		{"syntax error", policyWith(`
  - patchType: JSONPatch
    jsonPatch: {expression: "[]"}
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/x', value: 1}"
`), []string{`spec.mutations[1].jsonPatch.expression: Invalid value:`, `compilation failed: ERROR: <input>:1:`, `Syntax error`}},
		{"wrong return type apply", policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "object"}
`), []string{`spec.mutations[0].applyConfiguration.expression`, `must evaluate to Object but got dyn`}},
		{"wrong return type jsonpatch", policyWith(`
  - patchType: JSONPatch
    jsonPatch: {expression: "JSONPatch{op: 'add', path: '/x', value: 1}"}
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{}"}
`), []string{`spec.mutations[0].jsonPatch.expression`, `must evaluate to list(JSONPatch) but got JSONPatch`}},
		{"bad type name", policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Objectx{}"}
`), []string{`spec.mutations[0].applyConfiguration.expression`, `undeclared reference to 'Objectx'`}},
		{"undeclared params", policyWith(`
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/x', value: params.x}]"}
`), []string{`undeclared reference to 'params'`}},
		{"bad variable and condition", `
policy:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  reinvocationPolicy: Never
  variables: [{name: a, expression: "1 +"}]
  matchConditions: [{name: ok, expression: "true"}, {name: c, expression: "'x'"}]
  mutations: [{patchType: JSONPatch, jsonPatch: {expression: "[]"}}]
`, []string{`spec.variables[0].expression`, `spec.matchConditions[1].expression`, `must evaluate to bool`}},
		{"binding for another policy", `
policy: {metadata: {name: p}, apiVersion: admissionregistration.k8s.io/v1beta1, kind: MutatingAdmissionPolicy, spec: {matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}, reinvocationPolicy: Never, mutations: [{patchType: JSONPatch, jsonPatch: {expression: "[]"}}]}}
binding: {policyName: q}
`, []string{`spec.policyName: Invalid value: "q"`}},
		{"paramRef name and selector", `
policy: {paramKind: {apiVersion: v1, kind: ConfigMap}, matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}, reinvocationPolicy: Never, mutations: [{patchType: JSONPatch, jsonPatch: {expression: "[]"}}]}
binding: {paramRef: {name: a, selector: {}}}
`, []string{`spec.paramRef.name: Forbidden`}},
		{"param without name", `
policy: {paramKind: {apiVersion: v1, kind: ConfigMap}, matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}, reinvocationPolicy: Never, mutations: [{patchType: JSONPatch, jsonPatch: {expression: "[]"}}]}
params: [{data: {a: b}}]
`, []string{`params[0].metadata.name: Required value`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile([]byte(c.settings))
			if err == nil {
				t.Fatal("settings accepted")
			}
			if !errors.Is(err, ErrInvalidSettings) {
				t.Fatalf("error does not wrap ErrInvalidSettings: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\nwant it to contain\n  %s", err, w)
				}
			}
		})
	}
}

// policyWith is a Deployment/Pod policy with the given mutations (YAML list items).
func policyWith(mutations string) string {
	return `
policy:
  metadata: {name: test}
  matchConstraints:
    resourceRules:
    - {apiGroups: ["", apps, example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods, deployments, configmaps, widgets]}
  reinvocationPolicy: Never
  mutations:` + mutations
}

const sidecarApply = `
policy:
  apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingAdmissionPolicy
  metadata:
    name: "sidecar-policy.example.com"
  spec:
    paramKind:
      kind: Sidecar
      apiVersion: mutations.example.com/v1
    matchConstraints:
      resourceRules:
      - apiGroups:   [""]
        apiVersions: ["v1"]
        operations:  ["CREATE"]
        resources:   ["pods"]
    matchConditions:
      - name: does-not-already-have-sidecar
        expression: "!object.spec.initContainers.exists(ic, ic.name == \"mesh-proxy\")"
    failurePolicy: Fail
    reinvocationPolicy: IfNeeded
    mutations:
      - patchType: "ApplyConfiguration"
        applyConfiguration:
          expression: >
            Object{
              spec: Object.spec{
                initContainers: [
                  Object.spec.initContainers{
                    name: "mesh-proxy",
                    image: "mesh/proxy:v1.0.0",
                    args: ["proxy", "sidecar"],
                    restartPolicy: "Always"
                  }
                ]
              }
            }
binding:
  apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingAdmissionPolicyBinding
  metadata:
    name: "sidecar-binding-test.example.com"
  spec:
    policyName: "sidecar-policy.example.com"
    paramRef:
      name: "meshproxy-v1.0.0"
      namespace: "default"
      parameterNotFoundAction: Deny
params:
- apiVersion: mutations.example.com/v1
  kind: Sidecar
  metadata:
    name: meshproxy-v1.0.0
    namespace: default
  spec:
    name: mesh-proxy
    image: mesh/proxy:v1.0.0
    args: ["proxy", "sidecar"]
    restartPolicy: Always
`

const pod = `
apiVersion: v1
kind: Pod
metadata:
  name: myapp
  namespace: default
spec:
  initContainers:
  - name: init
    image: busybox
  containers:
  - name: app
    image: nginx
`

const podWithSidecar = `
apiVersion: v1
kind: Pod
metadata:
  name: myapp
  namespace: default
spec:
  initContainers:
  - name: init
    image: busybox
    resources: {}
  - name: mesh-proxy
    image: mesh/proxy:v1.0.0
    args: ["proxy", "sidecar"]
    restartPolicy: Always
    resources: {}
  containers:
  - name: app
    image: nginx
    resources: {}
status: {}
`

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      volumes:
      - name: x
        emptyDir: {}
      containers:
      - name: app
        image: nginx
        env:
        - {name: test, value: a}
        - {name: test, value: b}
        - {name: foo, value: bar}
`

// deploymentAfter is deployment as a typed round trip writes it, with the
// given replacements applied to its YAML text.
func deploymentAfter(replace ...string) string {
	d := strings.Replace(deployment, "        image: nginx\n", "        image: nginx\n        resources: {}\n", 1)
	d = strings.Replace(d, "    spec:\n      volumes", "    spec:\n      volumes", 1)
	d += "  strategy: {}\nstatus: {}\n"
	d = strings.Replace(d, "    metadata:\n      labels: {app: web}\n", "    metadata:\n      labels: {app: web}\n", 1)
	for i := 0; i+1 < len(replace); i += 2 {
		d = strings.Replace(d, replace[i], replace[i+1], 1)
	}
	return d
}

// TestMAPExamples runs the nine example cases of MAP.md.
func TestMAPExamples(t *testing.T) {
	// 1. volumes [{x}] + apply configuration adding y -> [{x},{y}]
	t.Run("1 apply adds volume by key", func(t *testing.T) {
		e := compile(t, policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{volumes: [Object.spec.template.spec.volumes{name: 'y'}]}}}}"
`))
		check(t, e, req{object: deployment}, want{object: deploymentAfter(
			"        emptyDir: {}\n", "        emptyDir: {}\n      - name: \"y\"\n")})
	})
	// 2. env [{test,a},{test,b},{foo,bar}] + env [{test,c}] -> [{test,c},{foo,bar}]
	t.Run("2 apply collapses duplicate keys", func(t *testing.T) {
		e := compile(t, policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{
          containers: [Object.spec.template.spec.containers{name: 'app', env: [Object.spec.template.spec.containers.env{name: 'test', value: 'c'}]}]}}}}
`))
		check(t, e, req{object: deployment}, want{object: deploymentAfter(
			"        - {name: test, value: a}\n        - {name: test, value: b}\n", "        - {name: test, value: c}\n")})
	})
	// 3. apply configuration on spec.selector -> atomic error
	t.Run("3 apply on atomic selector", func(t *testing.T) {
		e := compile(t, policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {'a': 'b'}}}}"
`))
		check(t, e, req{object: deployment}, want{reject: "policy 'test' with binding 'test-binding' denied request: error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.selector"})
	})
	// 4. failing test op -> unchanged, no error
	t.Run("4 failing test is a no-op", func(t *testing.T) {
		e := compile(t, policyWith(`
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'test', path: '/spec/replicas', value: 100}, JSONPatch{op: 'replace', path: '/spec/replicas', value: 3}]"
`))
		check(t, e, req{object: deployment}, want{unchanged: true})
	})
	// 5. escaped label key
	t.Run("5 escapeKey", func(t *testing.T) {
		e := compile(t, policyWith(`
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('k8s.io/x~y'), value: 'true'}]"
`))
		check(t, e, req{object: deployment}, want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web, \"k8s.io/x~y\": \"true\"}\n")})
	})
	// 6. params from a ConfigMap
	t.Run("6 params from ConfigMap", func(t *testing.T) {
		e := compile(t, `
policy:
  metadata: {name: replicas}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{replicas: int(params.data['k1'])}}"}
binding: {metadata: {name: replicas-binding}, paramRef: {name: cm, namespace: default}}
params: {apiVersion: v1, kind: ConfigMap, metadata: {name: cm, namespace: default}, data: {k1: "100"}}
`)
		check(t, e, req{object: deployment}, want{object: deploymentAfter("  replicas: 1\n", "  replicas: 100\n")})
	})
	// 7. variables
	t.Run("7 variables", func(t *testing.T) {
		e := compile(t, `
policy:
  metadata: {name: vars}
  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}
  reinvocationPolicy: Never
  variables: [{name: desired, expression: "10"}]
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: variables.desired + 1}]"}
`)
		check(t, e, req{object: deployment}, want{object: deploymentAfter("  replicas: 1\n", "  replicas: 11\n")})
	})
	// 8. matchCondition with optional on a production object -> unchanged
	t.Run("8 matchCondition false", func(t *testing.T) {
		e := compile(t, `
policy:
  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}
  reinvocationPolicy: Never
  matchConditions: [{name: test-only, expression: "object.metadata.?labels[\"environment\"] == optional.of(\"test\")"}]
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: 5}]"}
`)
		check(t, e, req{object: strings.Replace(deployment, "labels: {app: web}\nspec", "labels: {app: web, environment: production}\nspec", 1)}, want{unchanged: true})
		check(t, e, req{object: strings.Replace(deployment, "labels: {app: web}\nspec", "labels: {app: web, environment: test}\nspec", 1)},
			want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web, environment: test}\n", "  replicas: 1\n", "  replicas: 5\n")})
	})
	// 9. the Kubernetes docs' sidecar example, as apply configuration and as JSONPatch
	t.Run("9 sidecar apply configuration as in the docs", func(t *testing.T) {
		// args is an atomic list: the docs' apply configuration is refused by
		// Kubernetes too.
		e := compile(t, sidecarApply)
		check(t, e, req{object: pod}, want{reject: "policy 'sidecar-policy.example.com' with binding 'sidecar-binding-test.example.com' denied request: error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.initContainers[0].args"})
	})
	t.Run("9 sidecar apply configuration without args", func(t *testing.T) {
		e := compile(t, strings.Replace(sidecarApply, `args: ["proxy", "sidecar"],`, "", 1))
		check(t, e, req{object: pod}, want{object: strings.Replace(podWithSidecar, `    args: ["proxy", "sidecar"]`+"\n", "", 1)})
		// Already injected: the matchCondition is false.
		check(t, e, req{object: podWithSidecar}, want{unchanged: true})
	})
	t.Run("9 sidecar JSONPatch", func(t *testing.T) {
		e := compile(t, sidecarJSONPatch)
		check(t, e, req{object: pod}, want{object: podWithSidecar})
		check(t, e, req{object: podWithSidecar}, want{unchanged: true})
	})
}

const sidecarJSONPatch = `
policy:
  metadata: {name: sidecar-jsonpatch}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  matchConditions:
  - name: does-not-already-have-sidecar
    expression: "!object.spec.initContainers.exists(ic, ic.name == \"mesh-proxy\")"
  failurePolicy: Fail
  reinvocationPolicy: IfNeeded
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [
          JSONPatch{
            op: "add", path: "/spec/initContainers/-",
            value: Object.spec.initContainers{
              name: "mesh-proxy",
              image: "mesh/proxy:v1.0.0",
              args: ["proxy", "sidecar"],
              restartPolicy: "Always"
            }
          }
        ]
`
