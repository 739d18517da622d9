package mapdiff_test

import "strings"

type dreq struct {
	name, op, object, oldObject string
	// expect is a substring of the (Kubernetes) outcome, to keep the case honest.
	expect string
	// user and groups make the request (default: alice, system:authenticated).
	user   string
	groups []string
}

type dcase struct {
	name     string
	settings string
	requests []dreq
}

const pod = `
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
  volumes: [{name: data, emptyDir: {}}]
`

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default, labels: {app: api, environment: production}}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      volumes: [{name: x, emptyDir: {}}]
      containers:
      - name: app
        image: api:1
        env: [{name: test, value: a}, {name: test, value: b}, {name: foo, value: bar}]
`

const configMap = `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: other, labels: {tier: backend}}
data: {k: v}
`

const namespace = `
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
`

const widget = `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default}
spec: {size: 1, tags: [a]}
`

const job = `
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: batch}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
`

const service = `
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, protocol: TCP}]
`

func with(obj string, pairs ...string) string {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(obj, pairs[i]) {
			panic("with: " + pairs[i] + " not in object")
		}
		obj = strings.Replace(obj, pairs[i], pairs[i+1], 1)
	}
	return obj
}

// rules is a matchConstraints for the kinds of this suite.
const rules = `
    matchConstraints:
      resourceRules:
      - {apiGroups: ["", apps, batch, example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods, deployments, configmaps, namespaces, widgets, jobs, services]}`

func mkPolicy(name, extra, mutations string) string {
	return `
policy:
  apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingAdmissionPolicy
  metadata: {name: ` + name + `}
  spec:` + rules + `
    reinvocationPolicy: Never` + extra + `
    mutations:` + mutations + "\n"
}

func jsonPatch(expr string) string {
	return "\n    - patchType: JSONPatch\n      jsonPatch:\n        expression: " + quote(expr)
}

func apply(expr string) string {
	return "\n    - patchType: ApplyConfiguration\n      applyConfiguration:\n        expression: " + quote(expr)
}

// oneLine joins an expression written on several lines (single spaces in its
// string literals are kept).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

var cases = []dcase{
	{"add label apply", mkPolicy("add-label", "", apply(`Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}`)), []dreq{
		{op: "CREATE", object: pod, expect: `"mutated":"yes"`},
		{op: "CREATE", object: deployment},
		{op: "UPDATE", object: configMap, oldObject: configMap},
		{op: "CREATE", object: namespace},
		{op: "CREATE", object: job},
	}},
	{"add label JSONPatch", mkPolicy("add-label-jp", "", jsonPatch(`[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("k8s.io/x~y"), value: "v"}]`)), []dreq{
		{op: "CREATE", object: pod, expect: `k8s.io/x~y`},
		{op: "CREATE", object: with(pod, "labels: {app: web}", "labels: {}"), expect: "rejected"},
		{op: "CREATE", object: service, expect: "rejected"},
	}},
	{"sidecar JSONPatch with matchCondition", `
policy:
  metadata: {name: sidecar}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  matchConditions:
  - {name: no-sidecar, expression: '!object.spec.initContainers.exists(ic, ic.name == "mesh-proxy")'}
  reinvocationPolicy: IfNeeded
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/spec/initContainers/-", value: Object.spec.initContainers{
          name: "mesh-proxy", image: "mesh/proxy:v1.0.0", args: ["proxy", "sidecar"], restartPolicy: "Always"}}]
`, []dreq{
		{op: "CREATE", object: pod, expect: "mesh-proxy"},
		{name: "already injected", op: "CREATE", object: with(pod, "[{name: init, image: busybox}]", "[{name: init, image: busybox}, {name: mesh-proxy, image: mesh/proxy:v1.0.0}]")},
		{name: "UPDATE not matched", op: "UPDATE", object: pod, oldObject: pod},
		{name: "Deployment not matched", op: "CREATE", object: deployment},
	}},
	{"sidecar apply configuration as in the docs (atomic args)", mkPolicy("sidecar-apply", "", apply(`Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: "mesh-proxy", image: "mesh/proxy:v1.0.0", args: ["proxy", "sidecar"], restartPolicy: "Always"}]}}`)), []dreq{
		{op: "CREATE", object: pod, expect: "may not mutate atomic arrays, maps or structs: .spec.initContainers[0].args"},
	}},
	{"sidecar apply configuration without args", mkPolicy("sidecar-apply2", "", apply(`Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: "mesh-proxy", image: "mesh/proxy:v1.0.0", restartPolicy: "Always"}]}}`)), []dreq{
		{op: "CREATE", object: pod, expect: "mesh-proxy"},
		{name: "merge into existing by name", op: "CREATE", object: with(pod, "[{name: init, image: busybox}]", "[{name: mesh-proxy, image: old}]"), expect: "mesh/proxy:v1.0.0"},
	}},
	{"list-map merge by key", mkPolicy("volumes", "", apply(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{volumes: [Object.spec.template.spec.volumes{name: "y"}]}}}}`)), []dreq{
		{op: "CREATE", object: deployment, expect: `"name":"y"`},
	}},
	{"duplicate keys collapse", mkPolicy("env", "", apply(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", env: [Object.spec.template.spec.containers.env{name: "test", value: "c"}]}]}}}}`)), []dreq{
		{op: "CREATE", object: deployment, expect: `"value":"c"`},
	}},
	{"ports merge by containerPort and protocol", mkPolicy("ports", "", apply(`Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", ports: [Object.spec.containers.ports{containerPort: 80, name: "http"}, Object.spec.containers.ports{containerPort: 443}]}]}}`)), []dreq{
		{op: "CREATE", object: pod, expect: `"containerPort":443`},
	}},
	{"atomic selector", mkPolicy("selector", "", apply(`Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"a": "b"}}}}`)), []dreq{
		{op: "CREATE", object: deployment, expect: "may not mutate atomic arrays, maps or structs: .spec.selector"},
		{name: "Pod has no spec.selector", op: "CREATE", object: pod, expect: "field not declared in schema"},
	}},
	{"atomic command and tolerations", mkPolicy("atomic", "", apply(`Object{spec: Object.spec{tolerations: [Object.spec.tolerations{key: "k", operator: "Exists"}]}}`)), []dreq{
		{op: "CREATE", object: pod, expect: "may not mutate atomic arrays, maps or structs: .spec.tolerations"},
	}},
	{"unknown field apply", mkPolicy("unknown", "", apply(`Object{spec: Object.spec{replicaz: 3}}`)), []dreq{
		{op: "CREATE", object: deployment, expect: "field not declared in schema"},
	}},
	{"unknown field JSONPatch", mkPolicy("unknown-jp", "", jsonPatch(`[JSONPatch{op: "add", path: "/spec/replicaz", value: 3}]`)), []dreq{
		{op: "CREATE", object: deployment, expect: "replicaz"},
		{name: "custom resource keeps unknown fields", op: "CREATE", object: widget, expect: "replicaz"},
	}},
	{"failing test is a no-op", mkPolicy("test-op", "", jsonPatch(`[JSONPatch{op: "test", path: "/spec/replicas", value: 100}, JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`)), []dreq{
		{op: "CREATE", object: deployment},
		{op: "CREATE", object: with(deployment, "replicas: 1", "replicas: 100"), expect: `"replicas":3`},
	}},
	{"JSONPatch quirks", mkPolicy("quirks", "\n    failurePolicy: Ignore", jsonPatch(`[JSONPatch{op: "replace", path: "/metadata/labels/new", value: "v"}]`)+
		jsonPatch(`[JSONPatch{op: "add", path: "/metadata/annotations/a", value: "v"}]`)+
		jsonPatch(`[JSONPatch{op: "remove", path: "/metadata/labels/missing"}]`)+
		jsonPatch(`[JSONPatch{op: "copy", from: "/metadata/name", path: "/metadata/labels/copied"}, JSONPatch{op: "move", from: "/metadata/labels/copied", path: "/metadata/labels/moved"}]`)), []dreq{
		{op: "CREATE", object: pod, expect: `"moved":"web"`},
		{op: "CREATE", object: configMap, expect: `"new":"v"`},
		{name: "annotations present", op: "CREATE", object: with(configMap, "labels: {tier: backend}", "labels: {tier: backend}, annotations: {b: c}"), expect: `"a":"v"`},
	}},
	{"errors with failurePolicy Fail", mkPolicy("fail", "", jsonPatch(`[JSONPatch{op: "remove", path: "/spec/nosuch"}]`)+jsonPatch(`[JSONPatch{op: "replace", path: "/metadata/labels/after", value: "error"}]`)), []dreq{
		{op: "CREATE", object: deployment, expect: "Unable to remove nonexistent key"},
		{op: "CREATE", object: widget, expect: "rejected"},
	}},
	{"errors with failurePolicy Ignore", mkPolicy("ignore", "\n    failurePolicy: Ignore", jsonPatch(`[JSONPatch{op: "remove", path: "/spec/nosuch"}]`)+jsonPatch(`[JSONPatch{op: "replace", path: "/metadata/labels/after", value: "error"}]`)), []dreq{
		{op: "CREATE", object: deployment, expect: `"after":"error"`},
		{op: "CREATE", object: pod, expect: `"after":"error"`},
	}},
	{"type name mismatch", mkPolicy("mismatch", "", apply(`Object{spec: Object.specx{replicas: 2}}`)), []dreq{
		{op: "CREATE", object: deployment, expect: "type mismatch"},
	}},
	{"variables", mkPolicy("vars", `
    variables:
    - {name: base, expression: "has(object.spec.replicas) ? object.spec.replicas : 0"}
    - {name: desired, expression: "variables.base + 10"}
    - {name: never, expression: "1 / 0"}`, jsonPatch(`[JSONPatch{op: "add", path: "/metadata/labels/desired", value: string(variables.desired)}]`)), []dreq{
		{op: "CREATE", object: deployment, expect: `"desired":"11"`},
		{op: "CREATE", object: pod, expect: `"desired":"10"`},
	}},
	{"matchConditions", mkPolicy("conds", `
    matchConditions:
    - {name: test-env, expression: 'object.metadata.?labels["environment"] == optional.of("test")'}
    - {name: not-kube-system, expression: 'request.namespace != "kube-system"'}`, jsonPatch(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 5}]`)), []dreq{
		{name: "production", op: "CREATE", object: deployment},
		{name: "test", op: "CREATE", object: with(deployment, "environment: production", "environment: test"), expect: `"replicas":5`},
		{name: "test in kube-system", op: "CREATE", object: with(deployment, "environment: production", "environment: test", "namespace: default", "namespace: kube-system")},
	}},
	{"matchCondition error", mkPolicy("cond-error", `
    matchConditions:
    - {name: boom, expression: 'object.metadata.labels["missing"] == "x"'}`, jsonPatch(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 5}]`)), []dreq{
		{op: "CREATE", object: deployment, expect: "no such key: missing"},
	}},
	{"request and old object", mkPolicy("request", "", apply(`Object{metadata: Object.metadata{annotations: {
		"user": request.userInfo.username, "op": request.operation, "kind": request.kind.kind, "resource": request.resource.resource,
		"ns": namespaceObject == null ? "none" : namespaceObject.metadata.name,
		"old": oldObject == null ? "none" : string(oldObject.metadata.name),
		"dry": string(request.dryRun)}}}`)), []dreq{
		{op: "CREATE", object: pod, expect: `"user":"alice"`},
		{op: "UPDATE", object: pod, oldObject: pod, expect: `"old":"web"`},
		{name: "cluster-scoped", op: "CREATE", object: namespace, expect: `"ns":"none"`},
		{op: "CREATE", object: job, expect: `"resource":"jobs"`},
	}},
	{"exclude and resourceNames", `
policy:
  metadata: {name: exclude}
  matchConstraints:
    resourceRules:
    - {apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}
    excludeResourceRules:
    - {apiGroups: [apps], apiVersions: ["*"], operations: ["*"], resources: ["*"]}
    - {apiGroups: [""], apiVersions: ["*"], operations: ["*"], resources: [configmaps], resourceNames: [cfg]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"seen": "yes"}}}'}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"seen":"yes"`},
		{op: "CREATE", object: deployment},
		{op: "CREATE", object: configMap},
		{name: "other configmap", op: "CREATE", object: with(configMap, "name: cfg", "name: cfg2"), expect: `"seen":"yes"`},
		{op: "CONNECT", object: pod, expect: `"seen":"yes"`},
	}},
	{"objectSelector", mkPolicy("objsel", "", apply(`Object{metadata: Object.metadata{labels: {"seen": "yes"}}}`)) + `
binding:
  matchResources:
    objectSelector: {matchExpressions: [{key: app, operator: In, values: [web, old]}]}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"seen":"yes"`},
		{op: "CREATE", object: deployment},
		{name: "old object matches", op: "UPDATE", object: with(pod, "app: web", "app: new"), oldObject: with(pod, "app: web", "app: old"), expect: `"seen":"yes"`},
	}},
	{"namespaceSelector", mkPolicy("nssel", "", apply(`Object{metadata: Object.metadata{labels: {"seen": "yes"}}}`)) + `
binding:
  matchResources:
    namespaceSelector: {matchLabels: {env: prod}}
namespaces:
- metadata: {name: default, labels: {env: prod}}
- metadata: {name: other, labels: {env: dev}}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"seen":"yes"`},
		{op: "CREATE", object: configMap},
		{name: "cluster-scoped passes", op: "CREATE", object: with(namespace, "team: a", "env: dev")},
		{name: "namespace matched on its own labels", op: "CREATE", object: with(namespace, "team: a", "env: prod"), expect: `"seen":"yes"`},
	}},
	{"namespaceSelector on metadata.name", mkPolicy("nsname", `
    matchConstraints:
      namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]}
      resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]`, jsonPatch(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 2}]`)), []dreq{
		{op: "CREATE", object: deployment, expect: `"replicas":2`},
		{name: "kube-system", op: "CREATE", object: with(deployment, "namespace: default", "namespace: kube-system")},
	}},
	{"params by name", `
policy:
  metadata: {name: params-name}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{spec: Object.spec{replicas: int(params.data["k1"])}}'}
binding:
  metadata: {name: params-name-binding}
  paramRef: {name: replicas, namespace: default}
params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: replicas, namespace: default}, data: {k1: "100"}}
`, []dreq{
		{op: "CREATE", object: deployment, expect: `"replicas":100`},
		{name: "other namespace uses the same param", op: "CREATE", object: with(deployment, "namespace: default", "namespace: other"), expect: `"replicas":100`},
	}},
	{"params in the request namespace", `
policy:
  metadata: {name: params-ns}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "replace", path: "/spec/replicas", value: int(params.data.count)}]'}
binding:
  paramRef: {name: scale, parameterNotFoundAction: Deny}
params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: scale, namespace: default}, data: {count: "3"}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: scale, namespace: other}, data: {count: "4"}}
`, []dreq{
		{op: "CREATE", object: deployment, expect: `"replicas":3`},
		{op: "CREATE", object: with(deployment, "namespace: default", "namespace: other"), expect: `"replicas":4`},
		{name: "not found Deny", op: "CREATE", object: with(deployment, "namespace: default", "namespace: third"), expect: "no params found for policy binding with `Deny` parameterNotFoundAction"},
		{name: "cluster-scoped request", op: "CREATE", object: with(deployment, "namespace: default, ", ""), expect: "rejected"},
	}},
	{"params not found Allow", `
policy:
  metadata: {name: params-allow}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "replace", path: "/spec/replicas", value: int(params.data.count)}]'}
binding:
  paramRef: {name: missing, namespace: default, parameterNotFoundAction: Allow}
params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: scale, namespace: default}, data: {count: "3"}}
`, []dreq{
		{op: "CREATE", object: deployment},
	}},
	{"params by selector, custom kind", `
policy:
  metadata: {name: params-selector}
  paramKind: {apiVersion: example.com/v1, kind: LabelSet}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {params.spec.key: params.spec.value}}}'}
binding:
  paramRef: {selector: {matchLabels: {use: "yes"}}, namespace: params}
params:
- {apiVersion: example.com/v1, kind: LabelSet, metadata: {name: a, namespace: params, labels: {use: "yes"}}, spec: {key: a, value: "1"}}
- {apiVersion: example.com/v1, kind: LabelSet, metadata: {name: b, namespace: params, labels: {use: "yes"}}, spec: {key: b, value: "2"}}
- {apiVersion: example.com/v1, kind: LabelSet, metadata: {name: c, namespace: params, labels: {use: "no"}}, spec: {key: c, value: "3"}}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"b":"2"`},
	}},
	{"no paramRef gives null params", `
policy:
  metadata: {name: params-null}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"params": params == null ? "null" : "set"}}}'}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"params":"null"`},
	}},
	{"mutations chain", mkPolicy("chain", "", jsonPatch(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 5}]`)+
		jsonPatch(`[JSONPatch{op: "replace", path: "/spec/replicas", value: object.spec.replicas * 2}]`)+
		apply(`Object{metadata: Object.metadata{labels: {"replicas": string(object.spec.replicas)}}}`)), []dreq{
		{op: "CREATE", object: deployment, expect: `"replicas":"10"`},
	}},
	{"custom resource without a known schema", mkPolicy("crd", "", apply(`Object{spec: Object.spec{size: 2, color: "red"}}`)), []dreq{
		{op: "CREATE", object: widget, expect: `"color":"red"`},
	}},
	{"custom resource list is atomic", mkPolicy("crd-list", "", apply(`Object{spec: Object.spec{tags: ["b"]}}`)), []dreq{
		{op: "CREATE", object: widget, expect: "may not mutate atomic arrays, maps or structs: .spec.tags"},
	}},
	{"libraries", mkPolicy("libs", "", apply(`Object{metadata: Object.metadata{annotations: {
		"url": url("https://example.com:80/x").getHost(),
		"regex": "abc".find("[b-c]+"),
		"lists": [3, 1, 2].sort().map(x, string(x)).join(","),
		"quantity": string(quantity("1Gi").isGreaterThan(quantity("1Mi"))),
		"strings": "A,B".lowerAscii().split(",").join("-"),
		"sets": string(sets.contains([1, 2, 3], [2])),
		"ip": string(ip("10.0.0.1").family()),
		"cidr": string(cidr("10.0.0.0/8").containsIP(ip("10.1.2.3"))),
		"format": "%s-%d".format(["a", 1]),
		"semver": string(semver("1.2.3").isLessThan(semver("1.10.0"))),
		"twovar": string({"a": 1}.all(k, v, v > 0)),
		"optional": object.metadata.?annotations["x"].orValue("none")}}}`)), []dreq{
		{op: "CREATE", object: pod, expect: `"semver":"true"`},
		{op: "CREATE", object: service, expect: `"cidr":"true"`},
	}},
	{"cost limit", mkPolicy("cost", "", jsonPatch(`[JSONPatch{op: "add", path: "/metadata/labels/n", value: string([1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, a*b*c*d*e*f)))))).size())}]`)), []dreq{
		{op: "CREATE", object: pod, expect: "operation cancelled: actual cost limit exceeded"},
	}},
	{"v1alpha1 policy as bare spec", `
policy:
  matchConstraints:
    resourceRules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  reinvocationPolicy: IfNeeded
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{spec: Object.spec{backoffLimit: 2, template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "c", imagePullPolicy: "Always"}]}}}}'}
`, []dreq{
		{op: "CREATE", object: job, expect: `"backoffLimit":2`},
		{op: "CREATE", object: pod},
	}},
	{"typed struct fields exist (resources)", mkPolicy("resources", "", jsonPatch(`[JSONPatch{op: "add", path: "/spec/containers/0/resources/limits", value: {"cpu": "500m"}}]`)), []dreq{
		{op: "CREATE", object: pod, expect: `"limits":{"cpu":"500m"}`},
	}},
	{"quantities are normalized", mkPolicy("quantity", "", apply(`Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", resources: Object.spec.containers.resources{limits: {"cpu": "1000m", "memory": "1024Mi"}}}]}}`)), []dreq{
		{op: "CREATE", object: pod, expect: `"cpu":"1"`},
	}},
	{"old object drives the mutation", mkPolicy("from-old", `
    matchConditions:
    - {name: update, expression: 'request.operation == "UPDATE"'}`, apply(`Object{metadata: Object.metadata{labels: {"previous-app": oldObject.metadata.labels["app"]}}}`)), []dreq{
		{op: "UPDATE", object: with(pod, "app: web", "app: web2"), oldObject: pod, expect: `"previous-app":"web"`},
		{op: "CREATE", object: pod},
	}},
	{"service ports merge by port and protocol", mkPolicy("svc-ports", "", apply(`Object{spec: Object.spec{ports: [Object.spec.ports{port: 80, protocol: "TCP", name: "http"}, Object.spec.ports{port: 443, protocol: "TCP", name: "https"}]}}`)), []dreq{
		{op: "CREATE", object: service, expect: `"name":"https"`},
	}},
	{"JSONPatch replaces a whole list", mkPolicy("replace-list", "", jsonPatch(`[JSONPatch{op: "replace", path: "/spec/containers/0/env", value: [{"name": "B", "value": "2"}]}]`)), []dreq{
		{op: "CREATE", object: pod, expect: `"env":[{"name":"B","value":"2"}]`},
	}},
	{"params in matchConditions and variables", `
policy:
  metadata: {name: params-conds}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  variables:
  - {name: team, expression: 'params.data["team"]'}
  matchConditions:
  - {name: enabled, expression: 'params.data["enabled"] == "true"'}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"team": variables.team}}}'}
binding:
  paramRef: {selector: {}, namespace: config}
params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: turned-on, namespace: config}, data: {enabled: "true", team: payments}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: turned-off, namespace: config}, data: {enabled: "false", team: other}}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"team":"payments"`},
	}},
	{"namespaceObject labels", mkPolicy("ns-labels", "", apply(`Object{metadata: Object.metadata{labels: {"env": namespaceObject.metadata.labels["env"]}}}`)) + `
namespaces:
- metadata: {name: default, labels: {env: prod}}
`, []dreq{
		{op: "CREATE", object: pod, expect: `"env":"prod"`},
		{name: "namespace without the label", op: "CREATE", object: configMap, expect: "no such key: env"},
	}},
	{"format library", mkPolicy("format", "", apply(oneLine(`Object{metadata: Object.metadata{annotations: {
		"label": format.dns1123Label().validate(object.metadata.name + ".X").value().join("|"),
		"subdomain": string(format.dns1123Subdomain().validate(object.metadata.name).hasValue()),
		"dns1035": format.dns1035Label().validate("1" + object.metadata.name).value().join("|"),
		"qualified": format.qualifiedName().validate("a/b/c").value().join("|"),
		"prefix": string(format.dns1123SubdomainPrefix().validate(object.metadata.name + "-").hasValue()),
		"value": format.labelValue().validate("-x").value().join("|"),
		"uri": format.uri().validate("not a uri").value().join("|"),
		"uuid": string(format.uuid().validate("123e4567-e89b-12d3-a456-426614174000").hasValue()),
		"byte": format.byte().validate("aGVsbG8").value().join("|"),
		"date": format.date().validate("2021-02-30").value().join("|"),
		"datetime": format.datetime().validate("2021-01-01T25:00:00Z").value().join("|"),
		"long": format.named("dns1123Label").value().validate("abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij12345").value().join("|"),
		"none": string(format.named("nope").hasValue())}}}`))), []dreq{
		{op: "CREATE", object: pod, expect: `"long":"must be no more than 63 characters"`},
	}},
	{"new container by name in a Job", mkPolicy("job-container", "", apply(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "logger", image: "fluent-bit:3"}]}}}}`)), []dreq{
		{op: "CREATE", object: job, expect: `"name":"logger"`},
	}},
}
