package jsonengine

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// The engine is compared natively with package engine, which runs the
// apiserver's own code and which test/mapdiff checks against Kubernetes'
// admission plugin byte for byte; test/mapdiff also runs on this engine's
// module (TOLLGATE_MAP_MODULE). These cases cover what the engine does on
// JSON objects: typed round trips, matching, conditions, variables, params,
// namespaces, JSON patches and their errors.

const podYAML = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  initContainers: [{name: init, image: busybox}]
  containers:
  - name: app
    image: nginx
    ports: [{containerPort: 80}]
    env: [{name: A, value: "1"}]
    resources: {limits: {cpu: 1000m}}
  volumes: [{name: data, emptyDir: {}}]
`

const deploymentYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: team-a, labels: {app: api, environment: production}, creationTimestamp: "2026-01-02T03:04:05+01:00"}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: app, image: api:1}]
`

const widgetYAML = `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default}
spec: {size: 1, tags: [a]}
`

func policyYAML(extra, mutations string) string {
	return `
policy:
  metadata: {name: p}
  matchConstraints:
    resourceRules:
    - {apiGroups: ["", apps, example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods, deployments, widgets]}
  reinvocationPolicy: Never` + extra + `
  mutations:` + mutations + "\n"
}

func jp(expr string) string {
	b, _ := json.Marshal(expr)
	return "\n  - patchType: JSONPatch\n    jsonPatch: {expression: " + string(b) + "}"
}

func ac(expr string) string {
	b, _ := json.Marshal(expr)
	return "\n  - patchType: ApplyConfiguration\n    applyConfiguration: {expression: " + string(b) + "}"
}

type testRequest struct {
	op, object, oldObject, user string
	groups                      []string // with user (default: alice in system:authenticated)
	want                        string   // a substring of the outcome, so that a case tests what it says
}

var testCases = []struct {
	name, settings string
	requests       []testRequest
}{
	{"escaped label key", policyYAML("", jp(`[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("k8s.io/x~y"), value: "v"}]`)), []testRequest{
		{op: "CREATE", object: podYAML, want: `k8s.io/x~y`},
		{op: "CREATE", object: strings.Replace(podYAML, "labels: {app: web}", "labels: {}", 1), want: "missing value"},
		{op: "CREATE", object: widgetYAML, want: "missing value"},
	}},
	{"typed fields and quantities", policyYAML("", jp(`[JSONPatch{op: "add", path: "/spec/initContainers/0/resources/limits", value: {"memory": "1024Mi"}}]`)), []testRequest{
		{op: "CREATE", object: podYAML, want: `"memory":"1Gi"`},
	}},
	{"unknown field", policyYAML("", jp(`[JSONPatch{op: "add", path: "/spec/replicaz", value: 3}]`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: `unknown field \"spec.replicaz\"`},
		{op: "CREATE", object: widgetYAML, want: "replicaz"},
	}},
	{"failing test is a no-op", policyYAML("", jp(`[JSONPatch{op: "test", path: "/spec/replicas", value: 100}, JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: "unchanged"},
		{op: "CREATE", object: strings.Replace(deploymentYAML, "replicas: 1", "replicas: 100", 1), want: `"replicas":3`},
	}},
	{"variables, conditions and the request", policyYAML(`
  failurePolicy: Fail
  variables:
  - {name: desired, expression: "10"}
  - {name: never, expression: "1 / 0"}
  - {name: owner, expression: "request.userInfo.username + '@' + (has(request.namespace) ? request.namespace : 'none')"}
  matchConditions:
  - {name: not-kube-system, expression: 'request.namespace != "kube-system"'}
  - {name: has-labels, expression: 'has(object.metadata.labels)'}`,
		jp(`[JSONPatch{op: "replace", path: "/spec/replicas", value: variables.desired + 1}, JSONPatch{op: "add", path: "/metadata/labels/owner", value: variables.owner}]`)+
			jp(`[JSONPatch{op: "add", path: "/metadata/labels/never", value: string(variables.never)}]`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: "division by zero"},
		{op: "CREATE", object: strings.Replace(deploymentYAML, "team-a", "kube-system", 1), want: "unchanged"},
	}},
	{"failurePolicy Ignore keeps the other mutations", policyYAML(`
  failurePolicy: Ignore
  matchConditions:
  - {name: boom, expression: 'object.metadata.labels["app"] != "x"'}`,
		jp(`[JSONPatch{op: "remove", path: "/spec/nosuch"}]`)+jp(`[JSONPatch{op: "add", path: "/metadata/labels/after", value: "error"}]`)), []testRequest{
		{op: "CREATE", object: podYAML, want: `"after":"error"`},
		{op: "UPDATE", object: podYAML, oldObject: podYAML, want: `"after":"error"`},
	}},
	{"condition error with Fail", policyYAML(`
  matchConditions:
  - {name: boom, expression: 'object.metadata.labels["missing"] == "x"'}`, jp(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 2}]`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: "no such key: missing"},
	}},
	{"apply: list-maps merge by key, atomics refused", policyYAML("", ac(`Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", env: [Object.spec.containers.env{name: "B", value: "2"}], ports: [Object.spec.containers.ports{containerPort: 80, name: "http"}]}, Object.spec.containers{name: "log", image: "fluent-bit:3"}]}}`)), []testRequest{
		{op: "CREATE", object: podYAML, want: `"name":"log"`},
	}},
	{"apply: atomic list", policyYAML("", ac(`Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", args: ["x"]}]}}`)), []testRequest{
		{op: "CREATE", object: podYAML, want: "may not mutate atomic arrays, maps or structs"},
	}},
	{"apply: unknown field and type names", policyYAML("", ac(`Object{spec: Object.spec{replicaz: 3}}`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: "field not declared in schema"},
		{op: "CREATE", object: widgetYAML, want: `"replicaz":3`},
	}},
	{"apply: custom resource lists are atomic", policyYAML("", ac(`Object{spec: Object.spec{tags: ["b"], size: 2}}`)), []testRequest{
		{op: "CREATE", object: widgetYAML, want: "may not mutate atomic arrays"},
	}},
	{"apply: quantities and labels", policyYAML("", ac(`Object{metadata: Object.metadata{labels: {"team": "a"}}, spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", resources: Object.spec.template.spec.containers.resources{limits: {"cpu": "1000m"}}}]}}}}`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: `"cpu":"1"`},
	}},
	{"typed: omitzero, zero values and dropped empties as CEL sees them", policyYAML("", ac(`Object{metadata: Object.metadata{annotations: {"ts": string(has(object.metadata.creationTimestamp)), "status": string(has(object.status)), "labels": string(has(object.metadata.labels))}}}`)), []testRequest{
		{op: "CREATE", object: podYAML, want: `"ts":"false"`},
		{op: "CREATE", object: strings.Replace(podYAML, "labels: {app: web}", "labels: {}", 1), want: `"labels":"false"`},
		{op: "CREATE", object: deploymentYAML, want: `"ts":"true"`},
	}},
	{"typed: numbers must fit the field's Go type", policyYAML("", jp(`[JSONPatch{op: "replace", path: "/spec/replicas", value: object.metadata.name == "api" ? dyn(2.5) : dyn(5000000000)}]`)+
		jp(`[JSONPatch{op: "replace", path: "/spec/template/spec/containers/0/ports", value: [{"containerPort": "80"}]}]`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: "cannot unmarshal number 2.5 into Go struct field DeploymentSpec.spec.replicas of type int32"},
		{op: "CREATE", object: strings.Replace(deploymentYAML, "name: api,", "name: api2,", 1), want: "number 5000000000"},
	}},
	{"typed: a value of the wrong type", policyYAML("", jp(`[JSONPatch{op: "add", path: "/spec/template/spec/containers/0/ports", value: [{"containerPort": "80"}]}]`)), []testRequest{
		{op: "CREATE", object: deploymentYAML, want: "cannot unmarshal string into Go struct field"},
	}},
	{"cost limit", policyYAML("", jp(`[JSONPatch{op: "add", path: "/metadata/labels/n", value: string([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, a*b*c*d*e*f)))))).size())}]`)), []testRequest{
		{op: "CREATE", object: podYAML, want: "operation cancelled: actual cost limit exceeded"},
	}},
	{"format library", policyYAML("", ac(`Object{metadata: Object.metadata{annotations: {
		"label": format.dns1123Label().validate(object.metadata.name + ".X").value().join("|"),
		"subdomain": format.dns1123Subdomain().validate(object.metadata.name).hasValue() ? "bad" : "ok",
		"dns1035": format.dns1035Label().validate("1" + object.metadata.name).value().join("|"),
		"qualified": format.qualifiedName().validate("a/b/c").value().join("|"),
		"prefix": string(format.dns1123LabelPrefix().validate(object.metadata.name + "-").hasValue()),
		"value": format.labelValue().validate("-x").value().join("|"),
		"uri": format.uri().validate("not a uri").value().join("|"),
		"uuid": string(format.uuid().validate("123e4567-e89b-12d3-a456-426614174000").hasValue()),
		"byte": format.byte().validate("aGVsbG8").value().join("|"),
		"date": format.date().validate("2021-02-30").value().join("|"),
		"datetime": format.datetime().validate("2021-01-01T25:00:00Z").value().join("|"),
		"named": format.named("dns1035Label").value().validate("abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij12345").value().join("|"),
		"none": string(format.named("nope").hasValue())}}}`)), []testRequest{
		{op: "CREATE", object: podYAML, want: `"named":"must be no more than 63 characters"`},
	}},
	{"params and namespaces", `
policy:
  metadata: {name: replicas}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
    namespaceSelector: {matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "replace", path: "/spec/replicas", value: int(params.data.count)}, JSONPatch{op: "add", path: "/metadata/labels/ns", value: namespaceObject.metadata.labels["kubernetes.io/metadata.name"] + "-" + string(has(namespaceObject.spec))}]'}
binding:
  metadata: {name: replicas-binding}
  paramRef: {selector: {matchLabels: {kind: replicas}}, parameterNotFoundAction: Deny}
params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: team-a, labels: {kind: replicas}}, data: {count: "5"}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: team-b, labels: {kind: other}}, data: {count: "7"}}
namespaces:
- {metadata: {name: prod-ns, labels: {env: prod}}}
`, []testRequest{
		{op: "CREATE", object: deploymentYAML, want: `"replicas":5`},
		{op: "CREATE", object: strings.Replace(deploymentYAML, "team-a", "team-b", 1), want: "no params found"},
		{op: "CREATE", object: strings.Replace(deploymentYAML, "team-a", "prod-ns", 1), want: "unchanged"},
	}},
}

func TestAgainstEngine(t *testing.T) {
	ctx := context.Background()
	for _, c := range append(testCases, authzCases...) {
		t.Run(c.name, func(t *testing.T) {
			settings, err := yaml.YAMLToJSON([]byte(c.settings))
			if err != nil {
				t.Fatal(err)
			}
			ref, err := engine.Compile(settings)
			if err != nil {
				t.Fatalf("package engine refuses the settings: %v", err)
			}
			got, err := Compile(settings)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			for i, r := range c.requests {
				req := admissionRequest(t, r)
				want, err := ref.Evaluate(ctx, req)
				if err != nil {
					t.Fatalf("request %d: package engine: %v", i, err)
				}
				res, err := got.Evaluate(ctx, req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				w, g := outcome(t, want.Accepted, want.Object, want.Message, want.Code), outcome(t, res.Accepted, res.Object, res.Message, res.Code)
				if w != g {
					t.Fatalf("request %d differs\npackage engine: %s\njsonengine:     %s", i, w, g)
				}
				if !strings.Contains(w, r.want) {
					t.Fatalf("request %d: the outcome does not contain %q (the case does not test what it says): %s", i, r.want, w)
				}
			}
		})
	}
}

func admissionRequest(t *testing.T, r testRequest) *protocol.KubernetesAdmissionRequest {
	t.Helper()
	obj, err := yaml.YAMLToJSON([]byte(r.object))
	if err != nil {
		t.Fatal(err)
	}
	var hdr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
	}
	if err := json.Unmarshal(obj, &hdr); err != nil {
		t.Fatal(err)
	}
	group, version, found := strings.Cut(hdr.APIVersion, "/")
	if !found {
		group, version = "", hdr.APIVersion
	}
	resource := strings.ToLower(hdr.Kind) + "s"
	req := &protocol.KubernetesAdmissionRequest{
		UID:       "1",
		Kind:      protocol.GroupVersionKind{Group: group, Version: version, Kind: hdr.Kind},
		Resource:  protocol.GroupVersionResource{Group: group, Version: version, Resource: resource},
		Name:      hdr.Metadata.Name,
		Namespace: hdr.Metadata.Namespace,
		Operation: r.op,
		UserInfo:  protocol.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
		Object:    obj,
	}
	if r.user != "" {
		req.UserInfo = protocol.UserInfo{Username: r.user, Groups: r.groups}
	}
	if r.oldObject != "" {
		if req.OldObject, err = yaml.YAMLToJSON([]byte(r.oldObject)); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

// outcome is a comparable form of a result: the object re-encoded with
// sorted keys, without null values and without the top-level apiVersion
// and kind (as test/mapdiff normalizes).
func outcome(t *testing.T, accepted bool, object []byte, message string, code int32) string {
	t.Helper()
	if !accepted {
		b, _ := json.Marshal(struct {
			Code    int32
			Message string
		}{code, message})
		return "rejected " + string(b)
	}
	if object == nil {
		return "unchanged"
	}
	var v map[string]any
	if err := json.Unmarshal(object, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "apiVersion")
	delete(v, "kind")
	b, err := json.Marshal(dropNulls(v))
	if err != nil {
		t.Fatal(err)
	}
	return "mutated " + string(b)
}

func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			x[k] = dropNulls(e)
		}
	case []any:
		for i, e := range x {
			x[i] = dropNulls(e)
		}
	}
	return v
}

// TestDocumentedSettings: the module's documented JSONPatch settings
// (testdata) compile and inject the sidecar as package engine does.
func TestDocumentedSettings(t *testing.T) {
	settingsYAML, err := os.ReadFile("../testdata/sidecar-settings.yml")
	if err != nil {
		t.Fatal(err)
	}
	podRequest, err := os.ReadFile("../testdata/pod.json") // an AdmissionRequest
	if err != nil {
		t.Fatal(err)
	}
	req := &protocol.KubernetesAdmissionRequest{}
	if err := json.Unmarshal(podRequest, req); err != nil {
		t.Fatal(err)
	}
	settings, err := yaml.YAMLToJSON(settingsYAML)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := engine.Compile(settings)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Compile(settings)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	w, g := outcome(t, want.Accepted, want.Object, want.Message, want.Code), outcome(t, got.Accepted, got.Object, got.Message, got.Code)
	if w != g || !strings.Contains(g, "mesh-proxy") {
		t.Fatalf("package engine: %s\njsonengine:     %s", w, g)
	}
}
