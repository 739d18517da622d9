package mapdiff_test

// Cases for null and empty members of the request's object, which the
// outcome's normalized object does not see (it drops nulls) but the host's
// patch does (outcome.Patch, referencePatch): the apiserver's typed decoding
// turns a null into the zero value and the typed encoding writes it back,
// drops it (omitempty, omitzero) or keeps an empty value, and a webhook's
// patch must hold only what the policy changed. Apiservers before 1.33
// (kubernetes/kubernetes#130989) send `creationTimestamp: null` for every
// object without one (a Deployment's pod template has it too); a custom
// resource keeps whatever it was given.

// podNulls is pod with null and empty members where the typed encoding
// keeps, drops or changes them.
const podNulls = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, creationTimestamp: null, labels: {app: web}, annotations: null, finalizers: [], ownerReferences: null}
spec:
  nodeSelector: {}
  tolerations: []
  dnsConfig: null
  securityContext: {}
  initContainers: [{name: init, image: busybox, args: null, resources: {}}]
  containers:
  - name: app
    image: nginx
    ports: [{containerPort: 80}]
    env: [{name: A, value: "1"}, {name: B, value: null}]
    resources: {limits: null, requests: {}}
    securityContext: null
    command: []
  volumes: [{name: data, emptyDir: {}}]
status: {}
`

// deploymentNulls is a Deployment as apiservers before 1.33 send it: its
// template's creationTimestamp null, empty strategy and status.
const deploymentNulls = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default, creationTimestamp: null, labels: {app: api}}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  strategy: {}
  template:
    metadata: {creationTimestamp: null, labels: {app: api}}
    spec:
      containers:
      - {name: app, image: api:1, resources: {}}
status: {}
`

// widgetNulls is a custom resource (unstructured all the way) with nulls
// and empties (only fields its schema declares: a custom resource's object
// always fits its structural schema).
const widgetNulls = `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default, creationTimestamp: null, labels: null}
spec: {size: 1, color: null, tags: []}
`

// configMapNulls has empty and null data.
const configMapNulls = `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: other, creationTimestamp: null, labels: {tier: backend}}
data: {}
binaryData: null
`

var nullCases = []dcase{
	{"nulls: a label added by ApplyConfiguration", mkPolicy("nulls-apply", "", apply(`Object{metadata: Object.metadata{labels: {"added": "yes"}}}`)), []dreq{
		{name: "pod creationTimestamp null", op: "CREATE", object: with(pod, "namespace: default,", "namespace: default, creationTimestamp: null,"), expect: `"added":"yes"`},
		{name: "pod nulls and empties", op: "CREATE", object: podNulls, expect: `"added":"yes"`},
		{name: "pod nulls and empties, update", op: "UPDATE", object: podNulls, oldObject: podNulls, expect: `"added":"yes"`},
		{name: "deployment as apiservers before 1.33 send it", op: "CREATE", object: deploymentNulls, expect: `"added":"yes"`},
		{name: "widget nulls and empties", op: "CREATE", object: widgetNulls, expect: `"added":"yes"`},
		{name: "configmap empty and null data", op: "CREATE", object: configMapNulls, expect: `"added":"yes"`},
	}},
	{"nulls: JSONPatch beside null members", mkPolicy("nulls-jsonpatch", "", jsonPatch(`[
      JSONPatch{op: "add", path: "/metadata/annotations", value: {"a": "b"}},
      JSONPatch{op: "add", path: "/metadata/labels", value: {"app": "changed"}}]`)), []dreq{
		{name: "pod nulls and empties", op: "CREATE", object: podNulls, expect: `"a":"b"`},
		{name: "deployment as apiservers before 1.33 send it", op: "CREATE", object: deploymentNulls, expect: `"a":"b"`},
		{name: "widget nulls and empties", op: "CREATE", object: widgetNulls, expect: `"a":"b"`},
		{name: "configmap empty and null data", op: "CREATE", object: configMapNulls, expect: `"a":"b"`},
	}},
	{"nulls: ApplyConfiguration into the spec", mkPolicy("nulls-spec", "", apply(`object.kind == "Deployment" ?
      Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", image: "api:2"}]}}}} :
      Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", image: "nginx:2"}, Object.spec.containers{name: "log", image: "fluent-bit:3"}]}}`)), []dreq{
		{name: "pod nulls and empties", op: "CREATE", object: podNulls, expect: `"fluent-bit:3"`},
		{name: "deployment as apiservers before 1.33 send it", op: "CREATE", object: deploymentNulls, expect: `"api:2"`},
	}},
}

func init() { cases = append(cases, nullCases...) }
