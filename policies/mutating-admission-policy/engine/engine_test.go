package engine

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
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
	// Every case also checks that the fast path (canonicalObject) gives
	// exactly what the exact path gives.
	exact := *e
	exact.exactOnly = true
	resExact, err := exact.Evaluate(context.Background(), r.build(t))
	if err != nil {
		t.Fatalf("Evaluate (exact path): %v", err)
	}
	if !reflect.DeepEqual(res, resExact) {
		t.Fatalf("fast path\n  %+v (object %s)\nexact path\n  %+v (object %s)", res, res.Object, resExact, resExact.Object)
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
			checkInvalidSettings(t, err, c.want)
		})
	}
}

// checkInvalidSettings fails unless err is an ErrInvalidSettings whose
// message contains every string of want.
func checkInvalidSettings(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatal("settings accepted")
	}
	if !errors.Is(err, ErrInvalidSettings) {
		t.Fatalf("error does not wrap ErrInvalidSettings: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n  %v\nwant it to contain\n  %s", err, w)
		}
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

// policy returns settings for a policy on Deployments and Pods with the
// given extra spec fields and mutations; binding and params are appended verbatim.
func policy(spec string, mutations string, rest string) string {
	return `
policy:
  metadata: {name: p}
  matchConstraints:
    resourceRules:
    - {apiGroups: ["", apps, example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods, deployments, widgets, namespaces, configmaps]}
  reinvocationPolicy: Never
` + spec + `
  mutations:` + mutations + "\n" + rest
}

const setReplicas5 = `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: 5}]"}`

const failingMutation = `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'remove', path: '/spec/nosuchfield'}]"}`

var replicas5 = deploymentAfter("  replicas: 1\n", "  replicas: 5\n")

func TestFailurePolicy(t *testing.T) {
	cases := []struct {
		name     string
		settings string
		w        want
	}{
		{"Fail rejects a failing mutation", policy("  failurePolicy: Fail", failingMutation, ""),
			want{reject: "policy 'p' with binding 'p-binding' denied request: JSON Patch: error in remove for path: '/spec/nosuchfield': Unable to remove nonexistent key: nosuchfield: missing value"}},
		{"default is Fail", policy("", failingMutation, ""), want{reject: "policy 'p' with binding 'p-binding' denied request: JSON Patch"}},
		{"Ignore drops the error", policy("  failurePolicy: Ignore", failingMutation, ""), want{unchanged: true}},
		{"later mutations still run, Ignore keeps them", policy("  failurePolicy: Ignore", failingMutation+setReplicas5, ""), want{object: replicas5}},
		{"later mutations still run, Fail rejects", policy("  failurePolicy: Fail", failingMutation+setReplicas5, ""), want{reject: "JSON Patch: error in remove for path"}},
		{"matchCondition error goes to Fail", policy("  matchConditions: [{name: boom, expression: \"object.metadata.labels['missing'] == 'x'\"}]", setReplicas5, ""),
			want{reject: "policy 'p' with binding 'p-binding' denied request: expression 'object.metadata.labels['missing'] == 'x'' resulted in error: no such key: missing"}},
		{"matchCondition error goes to Ignore", policy("  failurePolicy: Ignore\n  matchConditions: [{name: boom, expression: \"object.metadata.labels['missing'] == 'x'\"}]", setReplicas5, ""),
			want{unchanged: true}},
		{"runtime type name mismatch", policy("", `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.specx{replicas: 2}}"}`, ""), want{reject: "type mismatch"}},
		{"unknown field rejected for built-in types (apply)", policy("", `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{replicaz: 2}}"}`, ""), want{reject: "field not declared in schema"}},
		{"unknown field rejected for built-in types (JSONPatch)", policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/spec/replicaz', value: 2}]"}`, ""), want{reject: `unknown field "spec.replicaz"`, code: 500}},
		{"cost limit exceeded", policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'n': string([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, a*b*c*d*e*f)))))).size())}}]"}`, ""),
			want{reject: "operation cancelled: actual cost limit exceeded"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check(t, compile(t, c.settings), req{object: deployment}, c.w)
		})
	}
}

func TestJSONPatchQuirks(t *testing.T) {
	cases := []struct {
		name, expr string
		w          want
	}{
		{"replace of a missing map key adds", "[JSONPatch{op: 'replace', path: '/metadata/labels/new', value: 'v'}]",
			want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web, new: v}\n")}},
		{"add under a missing parent is an error", "[JSONPatch{op: 'add', path: '/metadata/annotations/a', value: 'v'}]",
			want{reject: "JSON Patch: add operation does not apply: doc is missing path"}},
		{"add parent first works", "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {}}, JSONPatch{op: 'add', path: '/metadata/annotations/a', value: 'v'}]",
			want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web}\n  annotations: {a: v}\n")}},
		{"replace of /- is an error", "[JSONPatch{op: 'replace', path: '/spec/template/spec/containers/-', value: Object.spec.template.spec.containers{name: 'x', image: 'y'}}]",
			want{reject: "JSON Patch"}},
		{"remove of a missing key is an error", "[JSONPatch{op: 'remove', path: '/metadata/labels/missing'}]",
			want{reject: "JSON Patch: error in remove for path: '/metadata/labels/missing': Unable to remove nonexistent key: missing: missing value"}},
		{"test that passes applies the rest", "[JSONPatch{op: 'test', path: '/spec/replicas', value: 1}, JSONPatch{op: 'replace', path: '/spec/replicas', value: 5}]",
			want{object: replicas5}},
		{"copy and move", "[JSONPatch{op: 'copy', from: '/metadata/labels/app', path: '/metadata/labels/copy'}, JSONPatch{op: 'move', from: '/metadata/labels/copy', path: '/metadata/labels/moved'}]",
			want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web, moved: web}\n")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := compile(t, policy("", "\n  - patchType: JSONPatch\n    jsonPatch:\n      expression: \""+strings.ReplaceAll(c.expr, `"`, `\"`)+"\"", ""))
			check(t, e, req{object: deployment}, c.w)
		})
	}
}

const widget = `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default}
spec: {size: 1, tags: [a]}
`

func TestSchemaless(t *testing.T) {
	// Without a schema (a custom resource), every list is atomic.
	e := compile(t, policy("", `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{tags: ['b']}}"}`, ""))
	check(t, e, req{object: widget}, want{reject: "may not mutate atomic arrays, maps or structs: .spec.tags"})
	// Maps and scalars merge.
	e = compile(t, policy("", `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{size: 2, color: 'red'}}"}`, ""))
	check(t, e, req{object: widget}, want{object: strings.Replace(widget, "spec: {size: 1, tags: [a]}", "spec: {size: 2, tags: [a], color: red}", 1)})
	// JSONPatch leaves unknown fields alone on custom resources.
	e = compile(t, policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/spec/tags/-', value: 'b'}]"}`, ""))
	check(t, e, req{object: widget}, want{object: strings.Replace(widget, "tags: [a]", "tags: [a, b]", 1)})
}

const labelFromRequest = `
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {'user': request.userInfo.username, 'op': request.operation,
          'ns': namespaceObject == null ? 'none' : namespaceObject.metadata.name,
          'old': oldObject == null ? 'none' : 'some', 'res': request.resource.resource}}}`

func TestMatching(t *testing.T) {
	labeled := func(obj string, labels string) string {
		return strings.Replace(obj, "  labels: {app: web}\n", "  labels: {app: web"+labels+"}\n", 1)
	}
	cases := []struct {
		name     string
		settings string
		r        req
		w        want
	}{
		{"request variables", policy("", labelFromRequest, ""), req{object: deployment},
			want{object: labeled(deploymentAfter(), ", user: alice, op: CREATE, ns: default, old: none, res: deployments")}},
		{"UPDATE sees oldObject", policy("", labelFromRequest, ""), req{op: "UPDATE", object: deployment, oldObject: deployment},
			want{object: labeled(deploymentAfter(), ", user: alice, op: UPDATE, ns: default, old: some, res: deployments")}},
		{"DELETE is never handled", policy("", setReplicas5, ""), req{op: "DELETE", oldObject: deployment}, want{unchanged: true}},
		{"operation not in rules", policy("", setReplicas5, ""), req{op: "CONNECT", object: deployment}, want{unchanged: true}},
		{"resource not in rules", strings.Replace(policy("", setReplicas5, ""), "resources: [pods, deployments, widgets, namespaces, configmaps]", "resources: [pods]", 1), req{object: deployment}, want{unchanged: true}},
		{"exclude wins over include", strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n",
			"    excludeResourceRules: [{apiGroups: [apps], apiVersions: ['*'], operations: ['*'], resources: ['*']}]\n  reinvocationPolicy: Never\n", 1), req{object: deployment}, want{unchanged: true}},
		{"resourceNames", strings.Replace(policy("", setReplicas5, ""), "resources: [pods, deployments, widgets, namespaces, configmaps]}", "resources: [deployments], resourceNames: [other]}", 1), req{object: deployment}, want{unchanged: true}},
		{"objectSelector no match", strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    objectSelector: {matchLabels: {app: db}}\n  reinvocationPolicy: Never\n", 1), req{object: deployment}, want{unchanged: true}},
		{"objectSelector matches new", strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    objectSelector: {matchLabels: {app: web}}\n  reinvocationPolicy: Never\n", 1), req{object: deployment}, want{object: replicas5}},
		{"objectSelector matches the old object only", strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    objectSelector: {matchLabels: {app: old}}\n  reinvocationPolicy: Never\n", 1),
			req{op: "UPDATE", object: deployment, oldObject: strings.Replace(deployment, "  labels: {app: web}\n", "  labels: {app: old}\n", 1)}, want{object: replicas5}},
		{"namespaceSelector by metadata.name label", strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}\n  reinvocationPolicy: Never\n", 1), req{object: deployment}, want{object: replicas5}},
		{"namespaceSelector from settings namespaces", strings.Replace(policy("", setReplicas5, "namespaces: [{metadata: {name: default, labels: {env: prod}}}]"), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {env: test}}\n  reinvocationPolicy: Never\n", 1), req{object: deployment}, want{unchanged: true}},
		{"namespaceSelector on a Namespace object uses its own labels", strings.Replace(policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/labels/seen', value: 'yes'}]"}`, ""), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {team: a}}\n  reinvocationPolicy: Never\n", 1),
			req{object: "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {team: a}}\n"},
			want{object: "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {team: a, seen: \"yes\"}}\nspec: {}\nstatus: {}\n"}},
		{"namespaceSelector passes cluster-scoped objects", strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {env: none}}\n  reinvocationPolicy: Never\n", 1),
			req{object: strings.Replace(deployment, "  namespace: default\n", "", 1), namespace: ""}, want{object: strings.Replace(replicas5, "  namespace: default\n", "", 1)}},
		{"binding matchResources narrows", policy("", setReplicas5, "binding: {matchResources: {objectSelector: {matchLabels: {app: other}}}}"), req{object: deployment}, want{unchanged: true}},
		{"binding matchResources without rules matches all", policy("", setReplicas5, "binding: {matchResources: {objectSelector: {matchLabels: {app: web}}}}"), req{object: deployment}, want{object: replicas5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check(t, compile(t, c.settings), c.r, c.w)
		})
	}
}

func TestParams(t *testing.T) {
	const setFromParams = `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {params.metadata.name: params.data.v}}}"}`
	const ps = `params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: default, labels: {pick: "yes"}}, data: {v: "1"}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: default, labels: {pick: "yes"}}, data: {v: "2"}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: other, labels: {pick: "yes"}}, data: {v: "3"}}
- {apiVersion: v1, kind: Secret, metadata: {name: a, namespace: default}}`
	spec := "  paramKind: {apiVersion: v1, kind: ConfigMap}"
	labeled := func(labels string) string {
		return deploymentAfter("  labels: {app: web}\n", "  labels: {app: web"+labels+"}\n")
	}
	cases := []struct {
		name, binding string
		w             want
	}{
		{"by name in the request namespace", "binding: {paramRef: {name: a}}\n" + ps, want{object: labeled(", a: \"1\"")}},
		{"by name in another namespace", "binding: {paramRef: {name: c, namespace: other}}\n" + ps, want{object: labeled(", c: \"3\"")}},
		{"selector gives one invocation per param", "binding: {paramRef: {selector: {matchLabels: {pick: \"yes\"}}}}\n" + ps, want{object: labeled(", a: \"1\", b: \"2\"")}},
		{"not found, Deny", "binding: {paramRef: {name: zz, parameterNotFoundAction: Deny}}\n" + ps,
			want{reject: "policy 'p' with binding 'p-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"}},
		{"not found defaults to Deny", "binding: {paramRef: {name: zz}}\n" + ps, want{reject: "no params found"}},
		{"not found, Allow", "binding: {paramRef: {name: zz, parameterNotFoundAction: Allow}}\n" + ps, want{unchanged: true}},
		{"not found, Deny, failurePolicy Ignore", "binding: {paramRef: {name: zz}}\n" + ps, want{unchanged: true}},
		{"no paramRef: params is null", "binding: {}\n" + ps, want{reject: "no such key: v"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := spec
			if strings.Contains(c.name, "Ignore") {
				sp += "\n  failurePolicy: Ignore"
			}
			mut := setFromParams
			if strings.Contains(c.name, "no paramRef") {
				mut = `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'p': params == null ? 'null' : params.data.v}}}"}`
				c.w = want{object: labeled(", p: \"null\"")}
			}
			check(t, compile(t, policy(sp, mut, c.binding)), req{object: deployment}, c.w)
		})
	}
	t.Run("namespaced params on a cluster-scoped request", func(t *testing.T) {
		e := compile(t, policy(spec, setFromParams, "binding: {paramRef: {name: a}}\n"+ps))
		check(t, e, req{object: "apiVersion: v1\nkind: Namespace\nmetadata: {name: n1}\n"},
			want{reject: "failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"})
	})
}

func TestVariables(t *testing.T) {
	e := compile(t, policy(`  variables:
  - {name: base, expression: "object.spec.replicas"}
  - {name: doubled, expression: "variables.base * 2"}
  - {name: unused, expression: "1 / 0"}`, `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: variables.doubled + variables.base}]"}`, ""))
	// unused divides by zero: variables are lazy, so it is never evaluated.
	check(t, e, req{object: deployment}, want{object: deploymentAfter("  replicas: 1\n", "  replicas: 3\n")})
}

func TestMutationsChain(t *testing.T) {
	// Each mutation sees the output of the previous one.
	e := compile(t, policy("", setReplicas5+`
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: object.spec.replicas * 2}]"}
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'r': string(object.spec.replicas)}}}"}`, ""))
	check(t, e, req{object: deployment}, want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web, r: \"10\"}\n", "  replicas: 1\n", "  replicas: 10\n")})
}

func TestLibraries(t *testing.T) {
	exprs := map[string]string{
		"url":        "url('https://example.com:80/x').getHost()",
		"regex":      "'abc'.find('[b-c]+')",
		"lists":      "[3,1,2].sort().map(x, string(x)).join(',')",
		"optional":   "object.metadata.?annotations['x'].orValue('none')",
		"quantity":   "string(quantity('1Gi').isGreaterThan(quantity('1Mi')))",
		"strings":    "'A,B'.lowerAscii().split(',').join('-')",
		"sets":       "string(sets.contains([1,2,3], [2]))",
		"ip":         "string(ip('10.0.0.1').family())",
		"cidr":       "string(cidr('10.0.0.0/8').containsIP(ip('10.1.2.3')))",
		"format":     "'%s-%d'.format(['a', 1])",
		"semver":     "string(semver('1.2.3').isLessThan(semver('1.10.0')))",
		"twovarcomp": "string({'a': 1}.all(k, v, v > 0))",
		"escapeKey":  "jsonpatch.escapeKey('a/b~c')",
	}
	wants := map[string]string{
		"url": "example.com:80", "regex": "bc", "lists": "1,2,3", "optional": "none", "quantity": "true",
		"strings": "a-b", "sets": "true", "ip": "4", "cidr": "true", "format": "a-1", "semver": "true", "twovarcomp": "true",
		"escapeKey": "a~1b~0c",
	}
	for name, expr := range exprs {
		t.Run(name, func(t *testing.T) {
			e := compile(t, policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'r': `+strings.ReplaceAll(expr, `"`, `\"`)+`}}]"}`, ""))
			check(t, e, req{object: deployment}, want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web}\n  annotations: {r: "+jsonQuote(wants[name])+"}\n")})
		})
	}
}

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestAuthorizer(t *testing.T) {
	e := compile(t, policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'allowed': string(authorizer.group('apps').resource('deployments').namespace('default').check('delete').allowed())}}]"}`, ""))
	check(t, e, req{object: deployment}, want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web}\n  annotations: {allowed: \"false\"}\n")})
}

func TestAPIVersions(t *testing.T) {
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			e := compile(t, `
policy:
  apiVersion: admissionregistration.k8s.io/`+v+`
  kind: MutatingAdmissionPolicy
  metadata: {name: versioned}
  spec:
    matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}
    reinvocationPolicy: Never
    mutations:
    - patchType: JSONPatch
      jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: 5}]"}
binding:
  apiVersion: admissionregistration.k8s.io/`+v+`
  kind: MutatingAdmissionPolicyBinding
  metadata: {name: versioned-binding}
  spec: {policyName: versioned}
`)
			check(t, e, req{object: deployment}, want{object: replicas5})
		})
	}
}

func TestTooManyMatchConditions(t *testing.T) {
	var conds strings.Builder
	for i := 0; i < 65; i++ {
		conds.WriteString("  - {name: c" + strings.Repeat("x", i) + ", expression: 'true'}\n")
	}
	_, err := Compile([]byte(policy("  matchConditions:\n"+conds.String(), setReplicas5, "")))
	if err == nil || !strings.Contains(err.Error(), "spec.matchConditions: Too many: 65: must have at most 64 items") {
		t.Fatalf("err %v", err)
	}
}

// TestRulesPrefilter checks that a request the policy's rules rule out is
// accepted before its objects are decoded (a malformed object is not even
// read), and that a request the rules let through is decoded.
func TestRulesPrefilter(t *testing.T) {
	e := compile(t, policyWith(setReplicas5))
	malformed := func(kind, group, version, resource, op string) *protocol.KubernetesAdmissionRequest {
		return &protocol.KubernetesAdmissionRequest{
			Kind:      protocol.GroupVersionKind{Group: group, Version: version, Kind: kind},
			Resource:  protocol.GroupVersionResource{Group: group, Version: version, Resource: resource},
			Operation: op, Namespace: "default", Name: "x",
			Object: json.RawMessage(`{"spec": {"replicas": "not a number"}}`),
		}
	}
	for _, c := range []struct {
		name    string
		r       *protocol.KubernetesAdmissionRequest
		decoded bool
	}{
		{"resource not in rules", malformed("Secret", "", "v1", "secrets", "CREATE"), false},
		{"operation not in rules", malformed("Deployment", "apps", "v1", "deployments", "CONNECT"), false},
		{"version not in rules", malformed("Deployment", "apps", "v1beta1", "deployments", "CREATE"), false},
		{"subresource not in rules", func() *protocol.KubernetesAdmissionRequest {
			r := malformed("Deployment", "apps", "v1", "deployments", "UPDATE")
			r.SubResource = "scale"
			return r
		}(), false},
		{"matching rules decode the object", malformed("Deployment", "apps", "v1", "deployments", "CREATE"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := e.Evaluate(context.Background(), c.r)
			if c.decoded {
				if err == nil || !strings.Contains(err.Error(), "request.object") {
					t.Fatalf("want a decoding error, got %v %+v", err, res)
				}
				return
			}
			if err != nil || !res.Accepted || res.Object != nil {
				t.Fatalf("want accepted unchanged without decoding, got %v %+v", err, res)
			}
		})
	}
	// Excluded rules rule a request out too.
	excl := compile(t, strings.Replace(policyWith(setReplicas5), "  reinvocationPolicy: Never\n",
		"    excludeResourceRules: [{apiGroups: [apps], apiVersions: ['*'], operations: ['*'], resources: ['*']}]\n  reinvocationPolicy: Never\n", 1))
	if res, err := excl.Evaluate(context.Background(), malformed("Deployment", "apps", "v1", "deployments", "CREATE")); err != nil || !res.Accepted || res.Object != nil {
		t.Fatalf("excluded: %v %+v", err, res)
	}
}

// Engine is safe for concurrent use (go test -race checks it): evaluations
// of one engine on several goroutines, the first ones racing to set up its
// type converters.
func TestEngineConcurrentEvaluate(t *testing.T) {
	for name, settings := range map[string]string{
		"apply": policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'team': 'payments'}}}"}`),
		"jsonpatch": sidecarJSONPatch,
	} {
		t.Run(name, func(t *testing.T) {
			e, err := Compile([]byte(settings))
			if err != nil {
				t.Fatal(err)
			}
			r := req{object: pod}.build(t)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 3 {
						res, err := e.Evaluate(context.Background(), r)
						if err != nil || res.Object == nil {
							t.Errorf("Evaluate: %v, %+v; want a mutated object", err, res)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
