package jsonengine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Objects the engine keeps from one evaluation to the next (the settings'
// params and namespaces, decoded once at Compile) and objects a cluster may
// keep (a host that caches its answers; the memo of one evaluation holds the
// cluster's answers too) must never be written to: an evaluation that
// modified one would change the next evaluation's answer. Package engine's
// memo deep-copies params for that reason; this package copies only the top
// level (to set apiVersion and kind) and otherwise relies on nothing writing
// into an object it did not make. Nothing does today: CEL values are
// immutable, the typed conversion (roundTrip) builds new maps and lists, the
// JSON patch works on bytes, structured-merge-diff's merge builds new maps and
// lists. But a mutation's result can share parts with a param or a namespace
// (an ApplyConfiguration's Object field set to params.spec.x is the param's
// own map or list, kept as it is by the merge where it is atomic or the kind
// schemaless, and by the typed conversion for a custom kind), so the next
// step that wrote into the object in place (a faster patcher, a normalizing
// pass) would write into the param. These tests evaluate, twice, policies
// whose mutations alias the param and the namespace into the object and then
// patch those parts again, and compare the cached objects' encodings before
// and after.

// aliasingWidgetSettings: a custom kind (schemaless merge, no typed
// conversion) whose mutations put the param's and the namespace's maps (an
// ApplyConfiguration may not set a custom kind's lists: atomic) and lists
// into the object, then merge into, patch and add to exactly those parts.
const aliasingWidgetSettings = `
policy:
  metadata: {name: alias}
  paramKind: {apiVersion: example.com/v1, kind: Setting}
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [widgets]}
  failurePolicy: Fail
  reinvocationPolicy: Never
  variables:
  - {name: nested, expression: "params.spec.nested"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{spec: Object.spec{extra: variables.nested, more: params.spec.nested}, metadata: Object.metadata{labels: namespaceObject.metadata.labels}}'}
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{spec: Object.spec{extra: Object.spec.extra{deep: Object.spec.extra.deep{k2: "v2"}}, more: Object.spec.more{deep: Object.spec.more.deep{k: "replaced"}}}, metadata: Object.metadata{labels: {"added": "x"}}}'}
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/spec/extra/deep/k3", value: params.spec.nested}, JSONPatch{op: "add", path: "/spec/list", value: params.spec.list}, JSONPatch{op: "add", path: "/spec/list/-", value: "w"}, JSONPatch{op: "replace", path: "/spec/list/1/x", value: 9}, JSONPatch{op: "add", path: "/metadata/labels/env", value: "changed"}]'}
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{spec: Object.spec{extra: Object.spec.extra{deep: Object.spec.extra.deep{k: "overwritten"}}}}'}
binding:
  metadata: {name: alias-binding}
  paramRef: {name: s, parameterNotFoundAction: Deny}
`

const aliasingWidgetParams = `
params:
- {apiVersion: example.com/v1, kind: Setting, metadata: {name: s}, spec: {list: [1, {x: "y"}], nested: {deep: {k: v}, num: 1.5}}}
namespaces:
- {metadata: {name: default, labels: {env: test}}}
`

// aliasingPodSettings: the same on a built-in kind (typed conversion,
// built-in schema) with a ConfigMap param.
const aliasingPodSettings = `
policy:
  metadata: {name: alias}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: params.data, annotations: namespaceObject.metadata.labels}}'}
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/labels/extra", value: "x"}, JSONPatch{op: "replace", path: "/metadata/annotations/env", value: "changed"}, JSONPatch{op: "add", path: "/spec/containers/-", value: {"name": "c2", "image": string(params.data.image)}}]'}
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"image": "overwritten"}, annotations: {"more": "y"}}}'}
binding:
  metadata: {name: alias-binding}
  paramRef: {name: cm, namespace: default, parameterNotFoundAction: Deny}
`

const aliasingPodParams = `
params:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm, namespace: default}, data: {image: "busybox", size: "1"}}
namespaces:
- {metadata: {name: default, labels: {env: test}}}
`

var aliasingCases = []struct {
	name, settings, params, object, want string
}{
	{"custom kind", aliasingWidgetSettings, aliasingWidgetParams, widgetYAML, `"k":"overwritten","k2":"v2","k3":{"deep":{"k":"v"},"num":1.5}`},
	{"built-in kind", aliasingPodSettings, aliasingPodParams, podYAML, `"labels":{"app":"web","extra":"x","image":"overwritten","size":"1"}`},
}

// evaluateTwice evaluates the request twice with e, and checks after each
// evaluation that cached (the cached objects' encoding) has not changed,
// then that both outcomes are the same and contain want.
func evaluateTwice(t *testing.T, e *Engine, object, want string, cached func() string) {
	t.Helper()
	req := admissionRequest(t, testRequest{op: "CREATE", object: object})
	before := cached()
	var first string
	for i := range 2 {
		res, err := e.Evaluate(context.Background(), req)
		if err != nil {
			t.Fatalf("evaluation %d: %v", i, err)
		}
		if after := cached(); after != before {
			t.Fatalf("evaluation %d modified the cached objects\nbefore: %s\nafter:  %s", i, before, after)
		}
		got := outcome(t, res.Accepted, res.Object, res.Message, res.Code)
		if !strings.Contains(got, want) {
			t.Fatalf("evaluation %d: the outcome does not contain %q (the case does not test what it says): %s", i, want, got)
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Fatalf("the second evaluation differs from the first\nfirst:  %s\nsecond: %s", first, got)
		}
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSettingsObjectsUnchanged: the settings' params and namespaces are the
// same, byte for byte, after evaluations whose mutations alias them.
func TestSettingsObjectsUnchanged(t *testing.T) {
	for _, c := range aliasingCases {
		t.Run(c.name, func(t *testing.T) {
			settings, err := yaml.YAMLToJSON([]byte(c.settings + c.params))
			if err != nil {
				t.Fatal(err)
			}
			e, err := Compile(settings)
			if err != nil {
				t.Fatal(err)
			}
			evaluateTwice(t, e, c.object, c.want, func() string {
				return "params " + mustMarshal(t, e.s.Params) + "\nnamespaces " + mustMarshal(t, e.namespaces)
			})
		})
	}
}

// cachingCluster answers every call with the same objects, as a host that
// caches its answers would: the objects must come back unchanged.
type cachingCluster struct {
	namespaces map[string]map[string]any
	params     []map[string]any
}

func (c *cachingCluster) Namespace(name string) (map[string]any, error) {
	return c.namespaces[name], nil
}

func (c *cachingCluster) ParamsNamespaced(apiVersion, kind string) (bool, error) {
	return kind == "ConfigMap", nil
}

func (c *cachingCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]map[string]any, error) {
	var out []map[string]any
	for _, p := range c.params {
		if p["kind"] == kind && get(p, "metadata", "name") == name {
			out = append(out, p)
		}
	}
	return out, nil
}

func (c *cachingCluster) Authorize(AuthorizationRequest) (Decision, string, error) {
	return DecisionNoOpinion, "", nil
}

// TestClusterObjectsUnchanged: the same with fromCluster, the cluster
// answering every question with the same objects (params without apiVersion
// and kind, as list items come).
func TestClusterObjectsUnchanged(t *testing.T) {
	for _, c := range aliasingCases {
		t.Run(c.name, func(t *testing.T) {
			settings, err := yaml.YAMLToJSON([]byte(c.settings + "fromCluster: true\n"))
			if err != nil {
				t.Fatal(err)
			}
			e, err := Compile(settings)
			if err != nil {
				t.Fatal(err)
			}
			var offline struct {
				Params     []map[string]any
				Namespaces []map[string]any
			}
			js, err := yaml.YAMLToJSON([]byte(c.params))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(js, &offline); err != nil {
				t.Fatal(err)
			}
			cluster := &cachingCluster{namespaces: map[string]map[string]any{}}
			for _, ns := range offline.Namespaces {
				if cluster.namespaces[str(get(ns, "metadata", "name"))], err = DecodeObject([]byte(mustMarshal(t, ns))); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range offline.Params {
				q, err := DecodeObject([]byte(mustMarshal(t, p)))
				if err != nil {
					t.Fatal(err)
				}
				delete(q, "apiVersion") // as list items come; Params matches by kind
				cluster.params = append(cluster.params, q)
			}
			evaluateTwice(t, e.WithCluster(cluster), c.object, c.want, func() string {
				return "params " + mustMarshal(t, cluster.params) + "\nnamespaces " + mustMarshal(t, cluster.namespaces)
			})
		})
	}
}
