package engine

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/nulls"
)

// BenchmarkEvaluate is the native cost of one evaluation of the sidecar
// example and of a label-adding apply configuration on a Pod CREATE.
//
// The -pod5k cases run on test/testdata/reviews' 5 KB Pod (issue 24).
func BenchmarkEvaluate(b *testing.B) {
	labelApply := policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'team': 'payments'}}}"}`)
	for _, bc := range []struct{ name, settings, object string }{
		{"label-apply", labelApply, pod},
		{"sidecar", sidecarJSONPatch, pod},
		{"label-apply-pod5k", labelApply, ""},
		{"sidecar-pod5k", "", ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.settings == "" {
				// The documented sidecar refuses a Pod without initContainers.
				b2, err := os.ReadFile("../testdata/sidecar-any-pod-settings.yml")
				if err != nil {
					b.Fatal(err)
				}
				bc.settings = string(b2)
			}
			e, err := Compile([]byte(bc.settings))
			if err != nil {
				b.Fatal(err)
			}
			if bc.object == "" {
				bc.object = realisticPod(b)
			}
			r := req{object: bc.object}.build(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := e.Evaluate(context.Background(), r)
				if err != nil || res.Object == nil {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}

// BenchmarkEvaluateStages times the steps an evaluation of the label case is
// made of, one by one, to tell where the time goes (in Wasm, where pprof is
// not available: GOOS=wasip1 GOARCH=wasm go test -exec
// $(go env GOROOT)/lib/wasm/go_wasip1_wasm_exec with GOWASIRUNTIME=wazero).
func BenchmarkEvaluateStages(b *testing.B) {
	b.Run("example", func(b *testing.B) { evaluateStages(b, pod) })
	b.Run("pod5k", func(b *testing.B) { evaluateStages(b, realisticPod(b)) })
}

// realisticPod is request.object of test/testdata/reviews/pod.json, the 5 KB
// Pod of a Deployment (issue 24: figures from real objects).
func realisticPod(b *testing.B) string {
	raw, err := os.ReadFile("../../../test/testdata/reviews/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	var rv struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(raw, &rv); err != nil {
		b.Fatal(err)
	}
	return string(rv.Request.Object)
}

func evaluateStages(b *testing.B, object string) {
	e, err := Compile([]byte(policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'team': 'payments'}}}"}`)))
	if err != nil {
		b.Fatal(err)
	}
	r := req{object: object}.build(b)
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	obj, err := e.decodeObject(r.Object, gvk)
	if err != nil {
		b.Fatal(err)
	}
	u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	res, err := e.Evaluate(context.Background(), r)
	if err != nil || res.Object == nil {
		b.Fatal(err)
	}
	after, _ := json.Marshal(obj)
	b.Run("evaluate", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.Evaluate(context.Background(), r)
		}
	})
	b.Run("decode-typed", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.decodeObject(r.Object, gvk)
		}
	})
	b.Run("to-unstructured", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		}
	})
	b.Run("from-unstructured", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.scheme.ConvertToVersion(&unstructured.Unstructured{Object: u}, gvk.GroupVersion())
		}
	})
	// The label's result and the object it came from, as patchOne converts
	// it: all of it through JSON (typedFromUnstructured, before splicing),
	// or only what changed (spliceTyped, of which deep-copy is a part).
	w := &canonicalObject{typed: obj, state: &fastState{}}
	merged := map[string]any{}
	for k, v := range w.UnstructuredContent() {
		merged[k] = v
	}
	meta := map[string]any{}
	for k, v := range merged["metadata"].(map[string]any) {
		meta[k] = v
	}
	meta["labels"] = map[string]any{"team": "payments"}
	merged["metadata"] = meta
	b.Run("result-to-typed-whole", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := e.typedFromUnstructured(&unstructured.Unstructured{Object: merged}, gvk, gvk); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("result-to-typed-splice", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := spliceTyped(obj, w.content, merged, false); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("deep-copy", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			obj.DeepCopyObject()
		}
	})
	b.Run("marshal-typed", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			json.Marshal(obj)
		}
	})
	b.Run("prune-nulls", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			nulls.Prune(after, r.Object)
		}
	})
	tc := e.types.GetTypeConverter(gvk)
	b.Run("smd-from-unstructured", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			tc.ObjectToTyped(&unstructured.Unstructured{Object: u})
		}
	})
	areq := &admissionv1.AdmissionRequest{UID: "x", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Operation: admissionv1.Create, UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}}
	b.Run("request-to-unstructured", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			runtime.DefaultUnstructuredConverter.ToUnstructured(areq)
		}
	})
	attr := admission.NewAttributesRecord(obj, nil, gvk, "default", "myapp", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "", admission.Create, nil, false, &user.DefaultInfo{Name: "alice"})
	b.Run("dispatch", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.dispatch(context.Background(), attr, &fastState{})
		}
	})
	b.Run("create-context", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.evaluator.compiler.CreateContext(context.Background())
		}
	})
	b.Run("patch", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			versioned, _ := admission.NewVersionedAttributes(attr, gvk, e.objects)
			versioned.VersionedObject = wrapTyped(versioned.VersionedObject, &fastState{})
			ictx := e.evaluator.compiler.CreateContext(context.Background())
			e.evaluator.patchers[0].Patch(ictx, patch.Request{MatchedResource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, VersionedAttributes: versioned,
				ObjectInterfaces: e.objects, OptionalVariables: plugincel.OptionalVariableBindings{Authorizer: e.authorizer}, TypeConverter: canonicalConverter{tc}}, celconfig.RuntimeCELCostBudget)
		}
	})
	b.Run("smd-apply", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			w := wrapTyped(obj, &fastState{})
			p := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "payments"}}}}
			p.SetGroupVersionKind(gvk)
			if _, err := patch.ApplyStructuredMergeDiff(canonicalConverter{tc}, w, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("smd-apply-typed", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "payments"}}}}
			p.SetGroupVersionKind(gvk)
			if _, err := patch.ApplyStructuredMergeDiff(tc, obj, p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
