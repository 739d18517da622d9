package mapdiff_test

// Cases for what the apiserver's typed objects do implicitly (issue 31: the
// TinyGo engine works on JSON objects and must reproduce it): a built-in
// object is decoded into its Go type before a policy sees it and encoded
// again after a patch, so CEL sees zero values of absent non-omitempty
// fields and no empty omitempty ones, times and quantities come back in
// canonical form, numbers are converted to the field's type (or refused),
// and null or empty values of a patch are dropped.

var typedCases = []dcase{
	{"typed: zero values and dropped empties as CEL sees them", mkPolicy("typed-has", "", apply(`Object{metadata: Object.metadata{annotations: {
      "status": string(has(object.status)),
      "ts": string(has(object.metadata.creationTimestamp)),
      "resources": string(has(object.spec.containers[0].resources)),
      "labels": string(has(object.metadata.labels)),
      "env": string(has(object.spec.containers[0].env))}}}`)), []dreq{
		{name: "with labels", op: "CREATE", object: pod, expect: `"status":"true"`},
		{name: "empty labels and env", op: "CREATE", object: with(pod, "labels: {app: web}", "labels: {}", `env: [{name: A, value: "1"}]`, "env: []"), expect: `"labels":"false"`},
	}},
	{"typed: times in canonical form", mkPolicy("typed-time", "", apply(`Object{metadata: Object.metadata{annotations: {"created": string(object.metadata.creationTimestamp)}}}`)), []dreq{
		{op: "CREATE", object: with(deployment, "namespace: default,", `namespace: default, creationTimestamp: "2026-01-02T03:04:05+01:00",`), expect: `"created":"2026-01-02T02:04:05Z"`},
	}},
	{"typed: numbers converted to the field's type", mkPolicy("typed-numbers", "\n    failurePolicy: Fail", jsonPatch(`[JSONPatch{op: "replace", path: "/spec/replicas", value: object.metadata.name == "api" ? 3.0 : 2.5}]`)), []dreq{
		{name: "a whole double", op: "CREATE", object: deployment, expect: `"replicas":3`},
		{name: "a fraction", op: "CREATE", object: with(deployment, "name: api,", "name: api2,"), expect: "rejected"},
	}},
	{"typed: int-or-string", mkPolicy("typed-intorstring", "", jsonPatch(`[JSONPatch{op: "add", path: "/spec/ports/0/targetPort", value: object.spec.ports[0].port == 80 ? dyn("http") : dyn(8080)}]`)), []dreq{
		{name: "a string", op: "CREATE", object: service, expect: `"targetPort":"http"`},
		{name: "a number", op: "CREATE", object: with(service, "port: 80", "port: 81"), expect: `"targetPort":8080`},
	}},
	{"typed: null and empty values of a patch", mkPolicy("typed-empties", "", jsonPatch(`[
      JSONPatch{op: "add", path: "/metadata/annotations", value: {}},
      JSONPatch{op: "add", path: "/metadata/labels/empty", value: null},
      JSONPatch{op: "replace", path: "/spec/containers/0/env", value: []},
      JSONPatch{op: "add", path: "/spec/containers/0/resources", value: {"requests": {"cpu": "0.5", "memory": "1e3"}}}]`)), []dreq{
		{op: "CREATE", object: pod, expect: `"cpu":"500m"`},
	}},
}

func init() { cases = append(cases, typedCases...) }
