package engine

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Objects with the field types whose conversions are hand-written
// (quantities, int-or-string, times, raw extensions, byte slices) and
// non-canonical spellings of them.
var canonicalFixtures = map[string]string{
	"pod": pod + `
    resources:
      limits: {cpu: 1000m, memory: 1Gi}
      requests: {cpu: "0.5", memory: "128974848"}
    ports: [{containerPort: 80}, {containerPort: 443, protocol: TCP, name: https}]
    readinessProbe: {httpGet: {port: http, path: /}, initialDelaySeconds: 3}
    livenessProbe: {tcpSocket: {port: 8080}}
  tolerations: [{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 30}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: In, values: ["x", "z"]}]}]}}}
status:
  startTime: "2026-11-21T09:00:00Z"
  conditions: [{type: Ready, status: "True", lastTransitionTime: "2026-11-21T09:00:01Z"}]
`,
	"deployment": deployment + `  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 1}}
`,
	"secret": `
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: default, creationTimestamp: "2026-11-21T09:00:00Z", annotations: {a: b}}
data: {k: aGVsbG8=}
stringData: {x: "y"}
type: Opaque
`,
	"configmap": `
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: default}
data: {k1: "100"}
binaryData: {b: AAEC}
`,
}

func decodeCanonicalFixture(t *testing.T, y string) runtime.Object {
	t.Helper()
	raw := mustJSON(t, y)
	var hdr metav1.TypeMeta
	if err := json.Unmarshal(raw, &hdr); err != nil {
		t.Fatal(err)
	}
	gvk := schema.FromAPIVersionAndKind(hdr.APIVersion, hdr.Kind)
	e := compile(t, sidecarJSONPatch)
	obj, err := e.decodeObject(raw, gvk)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestCanonicalMatchesTyped checks what the fast path relies on: a
// canonicalObject is seen by each consumer as its typed object is.
func TestCanonicalMatchesTyped(t *testing.T) {
	e := compile(t, sidecarJSONPatch)
	for name, y := range canonicalFixtures {
		t.Run(name, func(t *testing.T) {
			obj := decodeCanonicalFixture(t, y)
			state := &fastState{}
			w := wrapTyped(obj, state)
			c, ok := w.(*canonicalObject)
			if !ok {
				t.Fatalf("wrapTyped(%T) = %T", obj, w)
			}

			// CEL's activation: ToUnstructured.
			want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			got, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("ToUnstructured differs:\n%v\n%v", got, want)
			}

			// The JSONPatch patcher: the encoding.
			jw, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			jt, _ := json.Marshal(obj)
			if string(jw) != string(jt) {
				t.Fatalf("encoding differs:\n%s\n%s", jw, jt)
			}

			// The apply-configuration patcher: the structured-merge value.
			gvk := obj.GetObjectKind().GroupVersionKind()
			tc := e.types.GetTypeConverter(gvk)
			tvTyped, err := tc.ObjectToTyped(obj, typed.AllowDuplicates)
			if err != nil {
				t.Fatal(err)
			}
			tvCanon, err := canonicalConverter{tc}.ObjectToTyped(w, typed.AllowDuplicates)
			if err != nil {
				t.Fatal(err)
			}
			cmp, err := tvTyped.Compare(tvCanon)
			if err != nil {
				t.Fatal(err)
			}
			if !cmp.IsSame() {
				t.Fatalf("structured-merge values differ: %v", cmp)
			}
			if !reflect.DeepEqual(tvTyped.AsValue().Unstructured(), tvCanon.AsValue().Unstructured()) {
				t.Fatalf("structured-merge values differ:\n%v\n%v", tvTyped.AsValue().Unstructured(), tvCanon.AsValue().Unstructured())
			}

			// Matching: metadata through meta.Accessor.
			mw, err := meta.Accessor(w)
			if err != nil {
				t.Fatal(err)
			}
			mt, _ := meta.Accessor(obj)
			if !reflect.DeepEqual(mw.GetLabels(), mt.GetLabels()) || mw.GetName() != mt.GetName() {
				t.Fatalf("metadata differs")
			}
			if w.GetObjectKind().GroupVersionKind() != gvk {
				t.Fatalf("kind %v, want %v", w.GetObjectKind().GroupVersionKind(), gvk)
			}
			if unwrap(w) != obj || unwrap(obj) != obj {
				t.Fatal("unwrap does not return the typed object")
			}
			if cp := w.DeepCopyObject().(*canonicalObject); cp.typed == obj || !reflect.DeepEqual(cp.typed, obj) {
				t.Fatal("DeepCopyObject is not a deep copy")
			}
			if state.failed {
				t.Fatal("state failed")
			}
			// One conversion, reused.
			if reflect.ValueOf(c.UnstructuredContent()).Pointer() != reflect.ValueOf(got).Pointer() {
				t.Fatal("content converted twice")
			}
		})
	}
}

// badObject cannot be converted to unstructured (a channel field).
type badObject struct {
	metav1.TypeMeta `json:",inline"`
	C               chan int `json:"c"`
}

func (b *badObject) DeepCopyObject() runtime.Object { c := *b; return &c }

func TestCanonicalConversionFailureMarksState(t *testing.T) {
	state := &fastState{}
	w := wrapTyped(&badObject{C: make(chan int)}, state)
	if got := w.(*canonicalObject).UnstructuredContent(); len(got) != 0 {
		t.Fatalf("content %v, want empty", got)
	}
	if !state.failed {
		t.Fatal("a failed conversion must send the evaluation to the exact path")
	}
	state = &fastState{}
	wrapTyped(decodeCanonicalFixture(t, pod), state).(*canonicalObject).SetUnstructuredContent(map[string]any{})
	if !state.failed {
		t.Fatal("SetUnstructuredContent must send the evaluation to the exact path")
	}
	if wrapTyped(nil, state) != nil {
		t.Fatal("wrapTyped(nil) != nil")
	}
}

// TestFastPathFailureRerunsExactly: when the fast path reports a failed
// conversion, Evaluate's answer is the exact path's, for a mutation, a
// rejection and an unchanged object.
func TestFastPathFailureRerunsExactly(t *testing.T) {
	for _, c := range []struct {
		name, settings string
		r              req
	}{
		{"apply configuration", sidecarApply, req{object: pod}},
		{"JSONPatch", sidecarJSONPatch, req{object: pod}},
		{"unchanged", sidecarJSONPatch, req{object: podWithSidecar}},
		{"rejected", policyWith(failingMutation), req{object: deployment}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := compile(t, c.settings)
			exact := *e
			exact.exactOnly = true
			want, err := exact.Evaluate(context.Background(), c.r.build(t))
			if err != nil {
				t.Fatal(err)
			}
			failing := *e
			failing.failFast = true
			got, err := failing.Evaluate(context.Background(), c.r.build(t))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after a fast-path failure\n  %+v (object %s)\nexact\n  %+v (object %s)", got, got.Object, want, want.Object)
			}
		})
	}
}
