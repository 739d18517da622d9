package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"sigs.k8s.io/yaml"
)

// The live objects of test/mapdiff's cases.
const (
	fmPod = `
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
    readinessProbe: {httpGet: {port: 8080}}
    resources: {limits: {cpu: 100m}}
  volumes: [{name: data, emptyDir: {}}]
`
	fmDeployment = `
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
	fmConfigMap = `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: other, labels: {tier: backend}}
data: {k: v}
`
	fmWidget = `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default}
spec: {size: 1, tags: [a], nested: {deep: {x: 1}}}
`
	fmService = `
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, protocol: TCP}]
`
)

// yamlContent decodes YAML as the apiserver decodes JSON into unstructured
// content (integers as int64).
func yamlContent(t testing.TB, y string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("bad YAML in test: %v\n%s", err, y)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// liveContent is the content the engine holds for an object: for a built-in
// kind, the typed object's ToUnstructured (as canonicalObject computes it,
// with its nulls and defaults-free zero values); otherwise the decoded JSON.
func liveContent(t testing.TB, y string) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{Object: yamlContent(t, y)}
	gvk := u.GroupVersionKind()
	if !objectScheme.Recognizes(gvk) {
		return u.Object
	}
	obj, err := objectScheme.New(gvk)
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	c, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// smdApply is the reference: the apiserver's ApplyStructuredMergeDiff with
// the engine's type converter for the live object's kind, the patch carrying
// the same GVK (as the patcher sets it).
func smdApply(live, p map[string]any) (map[string]any, error) {
	lu := &unstructured.Unstructured{Object: deepCopyContent(live)}
	pu := &unstructured.Unstructured{Object: deepCopyContent(p)}
	tc := newTypeConverters(objectScheme).GetTypeConverter(lu.GroupVersionKind())
	out, err := patch.ApplyStructuredMergeDiff(tc, lu, pu)
	if err != nil {
		return nil, err
	}
	return out.(*unstructured.Unstructured).Object, nil
}

// deepCopyContent copies maps and lists (any scalar type, unlike
// runtime.DeepCopyJSON, which panics on non-JSON types).
func deepCopyContent(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return deepCopyValue(m).(map[string]any)
}

func deepCopyValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, v := range x {
			c[k] = deepCopyValue(v)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, v := range x {
			c[i] = deepCopyValue(v)
		}
		return c
	}
	return v
}

// fastApplyFor runs fastApply with the schema of the live object's kind.
func fastApplyFor(t testing.TB, live, p map[string]any) (map[string]any, bool) {
	t.Helper()
	gvk := (&unstructured.Unstructured{Object: live}).GroupVersionKind()
	s, root, ok := newTypeConverters(objectScheme).mergeSchema(gvk)
	if !ok {
		t.Fatalf("no merge schema for %v", gvk)
	}
	return fastApply(s, root, live, p)
}

// checkFastApply checks the invariant on one input: fastApply leaves its
// inputs alone, and when it vouches for a result, SMD succeeds with the same
// content. It returns fastApply's ok and SMD's result and error.
func checkFastApply(t testing.TB, live, p map[string]any) (bool, map[string]any, error) {
	t.Helper()
	liveCopy, patchCopy := deepCopyContent(live), deepCopyContent(p)
	got, ok := fastApplyFor(t, live, p)
	if !reflect.DeepEqual(live, liveCopy) {
		t.Fatalf("fastApply modified live:\n%s", dumpJSON(live))
	}
	if !reflect.DeepEqual(p, patchCopy) {
		t.Fatalf("fastApply modified the patch:\n%s", dumpJSON(p))
	}
	want, err := smdApply(live, p)
	if ok {
		if err != nil {
			t.Fatalf("fastApply vouched for a patch SMD rejects (%v)\nlive: %s\npatch: %s", err, dumpJSON(live), dumpJSON(p))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fastApply differs from SMD\nlive:  %s\npatch: %s\nfast:  %s\nsmd:   %s\nfast:  %#v\nsmd:   %#v",
				dumpJSON(live), dumpJSON(p), dumpJSON(got), dumpJSON(want), got, want)
		}
	}
	return ok, want, err
}

func dumpJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func TestFastApply(t *testing.T) {
	type tcase struct {
		name  string
		live  string // YAML, see liveContent
		patch string // YAML, apiVersion and kind are the live object's
		// fast: fastApply must vouch for it (the common cases).
		fast bool
		// err: SMD must reject it with this message (fastApply must decline).
		err string
		// expect: a substring of SMD's result as JSON, to keep the case honest.
		expect string
	}
	cases := []tcase{
		// Pod: labels, annotations, scalars.
		{name: "label add", live: fmPod, patch: `metadata: {labels: {mutated: "yes"}}`, fast: true, expect: `"labels":{"app":"web","mutated":"yes"}`},
		{name: "label overwrite", live: fmPod, patch: `metadata: {labels: {app: other}}`, fast: true, expect: `"labels":{"app":"other"}`},
		{name: "annotations on an object without any", live: fmPod, patch: `metadata: {annotations: {a: "1", b: "2"}}`, fast: true, expect: `"annotations":{"a":"1","b":"2"}`},
		{name: "empty annotations map", live: fmPod, patch: `metadata: {annotations: {}}`, fast: true, expect: `"annotations":{}`},
		{name: "empty labels keeps the labels", live: fmPod, patch: `metadata: {labels: {}}`, fast: true, expect: `"labels":{"app":"web"}`},
		{name: "string scalar", live: fmPod, patch: `spec: {serviceAccountName: robot}`, fast: true, expect: `"serviceAccountName":"robot"`},
		{name: "boolean scalar", live: fmPod, patch: `spec: {hostNetwork: true}`, fast: true, expect: `"hostNetwork":true`},
		{name: "numeric scalar", live: fmPod, patch: `spec: {terminationGracePeriodSeconds: 30}`, fast: true, expect: `"terminationGracePeriodSeconds":30`},
		{name: "float for a numeric field", live: fmPod, patch: `spec: {terminationGracePeriodSeconds: 1.5}`, fast: true, expect: `"terminationGracePeriodSeconds":1.5`},
		{name: "int-or-string as string over an int", live: fmPod, patch: `spec: {containers: [{name: app, readinessProbe: {httpGet: {port: http}}}]}`, fast: true, expect: `"port":"http"`},
		{name: "int-or-string as int", live: fmPod, patch: `spec: {containers: [{name: app, readinessProbe: {httpGet: {port: 9090}}}]}`, fast: true, expect: `"port":9090`},
		{name: "quantities in a granular map", live: fmPod, patch: `spec: {containers: [{name: app, resources: {limits: {memory: 1Gi}, requests: {cpu: 50m}}}]}`, fast: true, expect: `"limits":{"cpu":"100m","memory":"1Gi"}`},
		{name: "string for a numeric field", live: fmPod, patch: `spec: {terminationGracePeriodSeconds: "30"}`, err: "expected numeric"},
		{name: "number for a string field", live: fmPod, patch: `spec: {hostname: 5}`, err: "expected string"},
		{name: "map for a scalar field", live: fmPod, patch: `spec: {hostname: {a: b}}`, err: "expected string"},
		{name: "unknown field", live: fmPod, patch: `spec: {replicaz: 3}`, err: "field not declared in schema"},
		{name: "unknown field in a new container", live: fmPod, patch: `spec: {containers: [{name: new, imagez: x}]}`, err: "field not declared in schema"},
		{name: "spec.selector is not a Pod field", live: fmPod, patch: `spec: {selector: {matchLabels: {a: b}}}`, err: "field not declared in schema"},
		{name: "null label value", live: fmPod, patch: `metadata: {labels: {app: null}}`},
		{name: "null map", live: fmPod, patch: `metadata: {labels: null}`},
		{name: "other apiVersion", live: fmPod, patch: `apiVersion: v2`, err: "are not of the same gvk"},

		// Pod: list-maps and sets.
		{name: "sidecar initContainer", live: fmPod, patch: `spec: {initContainers: [{name: mesh-proxy, image: "mesh/proxy:v1.0.0", restartPolicy: Always}]}`, fast: true,
			expect: `"initContainers":[{"image":"busybox","name":"init","resources":{}},{"image":"mesh/proxy:v1.0.0","name":"mesh-proxy","restartPolicy":"Always"}]`},
		{name: "sidecar with atomic args", live: fmPod, patch: `spec: {initContainers: [{name: mesh-proxy, image: "mesh/proxy:v1.0.0", args: [proxy, sidecar], restartPolicy: Always}]}`,
			err: "may not mutate atomic arrays, maps or structs: .spec.initContainers[0].args"},
		{name: "sidecar merged into an existing initContainer by name", live: strings.Replace(fmPod, "[{name: init, image: busybox}]", "[{name: mesh-proxy, image: old}, {name: init, image: busybox}]", 1),
			patch: `spec: {initContainers: [{name: mesh-proxy, image: "mesh/proxy:v1.0.0"}]}`, fast: true, expect: `"image":"mesh/proxy:v1.0.0","name":"mesh-proxy"`},
		{name: "new container", live: fmPod, patch: `spec: {containers: [{name: logger, image: "fluent-bit:3"}]}`, fast: true, expect: `"name":"logger"`},
		{name: "env var added by name", live: fmPod, patch: `spec: {containers: [{name: app, env: [{name: B, value: "2"}]}]}`, fast: true, expect: `"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}]`},
		{name: "env var replaced by name", live: fmPod, patch: `spec: {containers: [{name: app, env: [{name: A, value: "9"}]}]}`, fast: true, expect: `"env":[{"name":"A","value":"9"}]`},
		{name: "ports by containerPort and defaulted protocol", live: fmPod, patch: `spec: {containers: [{name: app, ports: [{containerPort: 80, name: http}, {containerPort: 443}]}]}`, fast: true,
			expect: `"ports":[{"containerPort":80,"name":"http"},{"containerPort":443}]`},
		{name: "UDP port is another key", live: fmPod, patch: `spec: {containers: [{name: app, ports: [{containerPort: 80, protocol: UDP}]}]}`, fast: true,
			expect: `"ports":[{"containerPort":80},{"containerPort":80,"protocol":"UDP"}]`},
		{name: "TCP port given explicitly matches the default", live: fmPod, patch: `spec: {containers: [{name: app, ports: [{containerPort: 80, protocol: TCP, name: web}]}]}`, fast: true,
			expect: `"ports":[{"containerPort":80,"name":"web","protocol":"TCP"}]`},
		{name: "volume by name", live: fmPod, patch: `spec: {volumes: [{name: cache, emptyDir: {medium: Memory}}]}`, fast: true, expect: `{"emptyDir":{"medium":"Memory"},"name":"cache"}`},
		{name: "volume source merged", live: fmPod, patch: `spec: {volumes: [{name: data, emptyDir: {sizeLimit: 1Gi}}]}`, fast: true, expect: `"volumes":[{"emptyDir":{"sizeLimit":"1Gi"},"name":"data"}]`},
		{name: "empty list keeps the live list", live: fmPod, patch: `spec: {containers: []}`, fast: true, expect: `"name":"app"`},
		{name: "empty list where there is none", live: fmPod, patch: `spec: {ephemeralContainers: []}`, fast: true, expect: `"ephemeralContainers":[]`},
		{name: "container without a name has the default key", live: fmPod, patch: `spec: {containers: [{image: x}]}`, fast: true},
		{name: "duplicate keys in the patch", live: fmPod, patch: `spec: {containers: [{name: a, image: x}, {name: a, image: y}]}`, err: "duplicate entries for key"},
		{name: "null list item", live: fmPod, patch: `spec: {containers: [null]}`, err: "associative list with keys may not have a null element"},
		{name: "atomic tolerations", live: fmPod, patch: `spec: {tolerations: [{key: k, operator: Exists}]}`, err: "may not mutate atomic arrays, maps or structs: .spec.tolerations"},
		{name: "atomic command", live: fmPod, patch: `spec: {containers: [{name: app, command: [sh]}]}`, err: "may not mutate atomic arrays, maps or structs: .spec.containers[0].command"},
		{name: "atomic empty list", live: fmPod, patch: `spec: {containers: [{name: app, command: []}]}`, err: "may not mutate atomic"},
		{name: "set: finalizers", live: strings.Replace(fmPod, "labels: {app: web}", "labels: {app: web}, finalizers: [b, a]", 1), patch: `metadata: {finalizers: [c, a]}`, fast: true, expect: `"finalizers":["b","c","a"]`},
		{name: "set: new", live: fmPod, patch: `metadata: {finalizers: [x]}`, fast: true, expect: `"finalizers":["x"]`},
		{name: "set: duplicates in the patch", live: fmPod, patch: `metadata: {finalizers: [x, x]}`, err: "duplicate entries"},
		{name: "reordered list-map", live: strings.Replace(fmPod, "[{name: init, image: busybox}]", "[{name: a}, {name: b}, {name: c}, {name: d}]", 1),
			patch: `spec: {initContainers: [{name: c, image: c}, {name: x}, {name: a, image: a}, {name: "y"}]}`, fast: true},
		{name: "topology spread constraints keyed by two fields", live: fmPod, patch: `spec: {topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}`, fast: true},

		// Deployment.
		{name: "replicas", live: fmDeployment, patch: `spec: {replicas: 3}`, fast: true, expect: `"replicas":3`},
		{name: "atomic selector", live: fmDeployment, patch: `spec: {selector: {matchLabels: {a: b}}}`, err: "may not mutate atomic arrays, maps or structs: .spec.selector"},
		{name: "volume into the pod template", live: fmDeployment, patch: `spec: {template: {spec: {volumes: [{name: "y"}]}}}`, fast: true, expect: `"volumes":[{"emptyDir":{},"name":"x"},{"name":"y"}]`},
		{name: "duplicate env keys collapse", live: fmDeployment, patch: `spec: {template: {spec: {containers: [{name: app, env: [{name: test, value: c}]}]}}}`, fast: true,
			expect: `"env":[{"name":"test","value":"c"},{"name":"foo","value":"bar"}]`},
		{name: "untouched duplicate env keys stay", live: fmDeployment, patch: `spec: {template: {spec: {containers: [{name: app, image: "api:2"}]}}}`, fast: true,
			expect: `"env":[{"name":"test","value":"a"},{"name":"test","value":"b"},{"name":"foo","value":"bar"}]`},
		{name: "pod template label", live: fmDeployment, patch: `spec: {template: {metadata: {labels: {version: v2}}}}`, fast: true, expect: `"labels":{"app":"api","version":"v2"}`},
		{name: "int-or-string maxSurge", live: fmDeployment, patch: `spec: {strategy: {rollingUpdate: {maxSurge: 50%}}}`, fast: true, expect: `"maxSurge":"50%"`},
		{name: "Deployment has no hostname", live: fmDeployment, patch: `spec: {hostname: x}`, err: "field not declared in schema"},

		// ConfigMap and Service.
		{name: "ConfigMap data", live: fmConfigMap, patch: `data: {k2: v2}`, fast: true, expect: `"data":{"k":"v","k2":"v2"}`},
		{name: "ConfigMap immutable", live: fmConfigMap, patch: `immutable: true`, fast: true, expect: `"immutable":true`},
		{name: "ConfigMap data must be strings", live: fmConfigMap, patch: `data: {k: 1}`, err: "expected string"},
		{name: "Service ports by port and protocol", live: fmService, patch: `spec: {ports: [{port: 80, protocol: TCP, name: http}, {port: 443, protocol: TCP, name: https}]}`, fast: true,
			expect: `"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":0},{"name":"https","port":443,"protocol":"TCP"}]`},

		// A kind without a schema.
		{name: "schemaless fields", live: fmWidget, patch: `spec: {size: 2, color: red}`, fast: true, expect: `"spec":{"color":"red","nested":{"deep":{"x":1}},"size":2,"tags":["a"]}`},
		{name: "schemaless nested map", live: fmWidget, patch: `spec: {nested: {deep: {"y": true}, other: {z: 1.5}}}`, fast: true, expect: `"nested":{"deep":{"x":1,"y":true},"other":{"z":1.5}}`},
		{name: "schemaless list is atomic", live: fmWidget, patch: `spec: {tags: [b]}`, err: "may not mutate atomic arrays, maps or structs: .spec.tags"},
		{name: "schemaless new list is atomic", live: fmWidget, patch: `status: {items: [{a: 1}]}`, err: "may not mutate atomic arrays, maps or structs: .status.items"},
		{name: "schemaless map over a scalar", live: fmWidget, patch: `spec: {size: {a: 1}}`},
		{name: "schemaless map over null", live: strings.Replace(fmWidget, "nested: {deep: {x: 1}}", "nested: null", 1), patch: `spec: {nested: {a: 1}}`, fast: true, expect: `"nested":{"a":1}`},
		{name: "schemaless scalar over null", live: strings.Replace(fmWidget, "size: 1", "size: null", 1), patch: `spec: {size: 2}`, fast: true, expect: `"size":2`},
		{name: "schemaless empty map over null", live: strings.Replace(fmWidget, "nested: {deep: {x: 1}}", "nested: null", 1), patch: `spec: {nested: {}}`, fast: true, expect: `"nested":{}`},
		{name: "schemaless label", live: fmWidget, patch: `metadata: {labels: {a: b}}`, fast: true, expect: `"labels":{"a":"b"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			live := liveContent(t, c.live)
			p := yamlContent(t, c.patch)
			if _, ok := p["apiVersion"]; !ok {
				p["apiVersion"] = live["apiVersion"]
			}
			p["kind"] = live["kind"]
			ok, want, err := checkFastApply(t, live, p)
			if c.fast && !ok {
				t.Errorf("fastApply declined (SMD: err %v)", err)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("SMD error %v, want %q", err, c.err)
				}
				if ok {
					t.Error("fastApply vouched for an error")
				}
			} else if c.fast && err != nil {
				t.Errorf("SMD error %v", err)
			}
			if c.expect != "" && !strings.Contains(dumpJSON(want), c.expect) {
				t.Errorf("SMD result %s, want %s in it", dumpJSON(want), c.expect)
			}
		})
	}
}

// TestFastApplyDeclines covers inputs fastApply declines although SMD may
// accept them, and the live objects SMD rejects.
func TestFastApplyDeclines(t *testing.T) {
	pod := func() map[string]any { return liveContent(t, fmPod) }
	withPatch := func(live map[string]any, y string) map[string]any {
		p := yamlContent(t, y)
		p["apiVersion"], p["kind"] = live["apiVersion"], live["kind"]
		return p
	}
	cases := []struct {
		name  string
		live  func() map[string]any
		patch func(live map[string]any) map[string]any
		// smdOK: SMD accepts it (fastApply declines anyway).
		smdOK bool
	}{
		{"unknown field in the live object", func() map[string]any {
			l := pod()
			l["spec"].(map[string]any)["bogus"] = "x"
			return l
		}, func(l map[string]any) map[string]any { return withPatch(l, `metadata: {labels: {a: b}}`) }, false},
		{"wrong scalar type in the live object", func() map[string]any {
			l := pod()
			l["spec"].(map[string]any)["hostname"] = int64(3)
			return l
		}, func(l map[string]any) map[string]any { return withPatch(l, `metadata: {labels: {a: b}}`) }, false},
		{"float list key", pod, func(l map[string]any) map[string]any {
			p := withPatch(l, `spec: {containers: [{name: app}]}`)
			p["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["ports"] = []any{map[string]any{"containerPort": float64(80)}}
			return p
		}, true},
		{"non-JSON type in the patch", pod, func(l map[string]any) map[string]any {
			p := withPatch(l, `metadata: {}`)
			p["metadata"] = map[string]any{"labels": map[string]string{"a": "b"}}
			return p
		}, false},
		{"patch without kind", pod, func(l map[string]any) map[string]any {
			p := withPatch(l, `metadata: {labels: {a: b}}`)
			delete(p, "kind")
			return p
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			live := c.live()
			ok, _, err := checkFastApply(t, live, c.patch(live))
			if ok {
				t.Error("fastApply vouched for it")
			}
			if (err == nil) != c.smdOK {
				t.Errorf("SMD error %v, want success %v", err, c.smdOK)
			}
		})
	}
}

// TestFastApplySharesLive checks the documented sharing: untouched subtrees
// of live are shared, patched paths are new maps.
func TestFastApplySharesLive(t *testing.T) {
	live := liveContent(t, fmPod)
	p := yamlContent(t, `metadata: {labels: {a: b}}`)
	p["apiVersion"], p["kind"] = live["apiVersion"], live["kind"]
	got, ok := fastApplyFor(t, live, p)
	if !ok {
		t.Fatal("declined")
	}
	if reflect.ValueOf(got["spec"]).UnsafePointer() != reflect.ValueOf(live["spec"]).UnsafePointer() {
		t.Error("spec was copied")
	}
	if reflect.ValueOf(got["metadata"]).UnsafePointer() == reflect.ValueOf(live["metadata"]).UnsafePointer() {
		t.Error("metadata is live's map")
	}
	if reflect.ValueOf(got["metadata"].(map[string]any)["labels"]).UnsafePointer() == reflect.ValueOf(p["metadata"].(map[string]any)["labels"]).UnsafePointer() {
		t.Error("labels is the patch's map")
	}
}

func TestMergeSchema(t *testing.T) {
	tcs := newTypeConverters(objectScheme)
	for _, c := range []struct{ live, typeName string }{
		{fmPod, "io.k8s.api.core.v1.Pod"},
		{fmDeployment, "io.k8s.api.apps.v1.Deployment"},
		{fmConfigMap, "io.k8s.api.core.v1.ConfigMap"},
		{fmWidget, ""},
	} {
		gvk := (&unstructured.Unstructured{Object: yamlContent(t, c.live)}).GroupVersionKind()
		s, root, ok := tcs.mergeSchema(gvk)
		if !ok || s == nil || root.NamedType == nil {
			t.Fatalf("%v: no schema", gvk)
		}
		if c.typeName != "" && *root.NamedType != c.typeName {
			t.Errorf("%v: root %s, want %s", gvk, *root.NamedType, c.typeName)
		}
		if c.typeName == "" {
			if _, isSchemaless := tcs.GetTypeConverter(gvk).(*schemalessConverter); !isSchemaless {
				t.Errorf("%v has a schema", gvk)
			}
		}
		if _, ok := s.Resolve(root); !ok {
			t.Errorf("%v: root does not resolve", gvk)
		}
		// Cached: the same answer again.
		s2, root2, _ := tcs.mergeSchema(gvk)
		if s2 != s || *root2.NamedType != *root.NamedType {
			t.Errorf("%v: second lookup differs", gvk)
		}
	}
}

func TestMergeOrder(t *testing.T) {
	// live a b c d, patch c x a y (shared: c, a)
	pmatch := []int{2, -1, 0, -1}
	lmatch := []int{2, -1, 0, -1}
	var got []string
	mergeOrder(pmatch, lmatch, func(live, p int) {
		if p < 0 {
			got = append(got, "L"+string(rune('a'+live)))
		} else {
			got = append(got, "P"+[]string{"c", "x", "a", "y"}[p])
		}
	})
	// a (shared, not the next expected) waits for its turn in the patch's
	// order; c merges in place; d stays; the rest of the patch follows.
	want := "Lb Pc Ld Px Pa Py"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

func BenchmarkFastApply(b *testing.B) {
	live := liveContent(b, fmPod)
	p := yamlContent(b, `metadata: {labels: {mutated: "yes"}}`)
	p["apiVersion"], p["kind"] = live["apiVersion"], live["kind"]
	gvk := (&unstructured.Unstructured{Object: live}).GroupVersionKind()
	tcs := newTypeConverters(objectScheme)
	b.Run("fastApply", func(b *testing.B) {
		s, root, ok := tcs.mergeSchema(gvk)
		if !ok {
			b.Fatal("no schema")
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := fastApply(s, root, live, p); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("ApplyStructuredMergeDiff", func(b *testing.B) {
		tc := tcs.GetTypeConverter(gvk)
		lu := &unstructured.Unstructured{Object: live}
		pu := &unstructured.Unstructured{Object: p}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := patch.ApplyStructuredMergeDiff(tc, lu, pu); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFastApplyLiveNulls: a null in the live object merges like a missing
// value, and other Go scalar types SMD accepts are kept as they are.
func TestFastApplyLiveNulls(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(live map[string]any)
		patch string
	}{
		{"null labels", func(l map[string]any) { l["metadata"].(map[string]any)["labels"] = nil }, `metadata: {labels: {a: b}}`},
		{"null containers", func(l map[string]any) { l["spec"].(map[string]any)["initContainers"] = nil }, `spec: {initContainers: [{name: x}]}`},
		{"null scalar", func(l map[string]any) { l["spec"].(map[string]any)["hostname"] = nil }, `spec: {hostname: h}`},
		{"null env value", func(l map[string]any) {
			env := l["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["env"].([]any)
			env[0].(map[string]any)["value"] = nil
		}, `spec: {containers: [{name: app, env: [{name: A, value: "2"}]}]}`},
		{"Go int port kept", func(l map[string]any) {
			ports := l["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["ports"].([]any)
			ports[0].(map[string]any)["containerPort"] = int(80)
		}, `spec: {containers: [{name: app, ports: [{containerPort: 80, name: web}]}]}`},
		{"Go int32 elsewhere", func(l map[string]any) { l["spec"].(map[string]any)["priority"] = int32(5) }, `metadata: {labels: {a: b}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			live := liveContent(t, fmPod)
			c.edit(live)
			p := yamlContent(t, c.patch)
			p["apiVersion"], p["kind"] = live["apiVersion"], live["kind"]
			ok, _, err := checkFastApply(t, live, p)
			if err != nil {
				t.Fatalf("SMD: %v", err)
			}
			if !ok {
				t.Error("fastApply declined")
			}
		})
	}
}

// TestFastApplyConcurrent shares one schema and one live object between
// goroutines, as the engine does (run with -race).
func TestFastApplyConcurrent(t *testing.T) {
	live := liveContent(t, fmDeployment)
	liveCopy := deepCopyContent(live)
	patches := []string{
		`metadata: {labels: {a: b}}`,
		`spec: {template: {spec: {containers: [{name: app, env: [{name: x, value: "1"}]}, {name: side}]}}}`,
		`spec: {strategy: {rollingUpdate: {maxSurge: 2}}, paused: true}`,
	}
	var wg sync.WaitGroup
	for i := range 8 {
		p := yamlContent(t, patches[i%len(patches)])
		p["apiVersion"], p["kind"] = live["apiVersion"], live["kind"]
		want, err := smdApply(live, p)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, ok := fastApplyFor(t, live, p)
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("patch %d: ok %v, result differs", i, ok)
					return
				}
			}
		}()
	}
	wg.Wait()
	if !reflect.DeepEqual(live, liveCopy) {
		t.Error("live modified")
	}
}
