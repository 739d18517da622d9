package engine

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/randfill"
)

// TestJSONRoundTripExact checks jsonRoundTripExact's claim: for every
// built-in kind it accepts, decoding the JSON encoding of a randomly filled
// object gives exactly ToUnstructured's content (what the apiserver's CEL
// activation and structured-merge see). It also pins which kinds are
// accepted, so that the fast conversion is not silently lost.
func TestJSONRoundTripExact(t *testing.T) {
	filler := newObjectFiller()
	accepted := 0
	for gvk, typ := range objectScheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || !jsonRoundTripExact(reflect.PointerTo(typ)) {
			continue
		}
		accepted++
		for i := 0; i < 10; i++ {
			obj := reflect.New(typ).Interface().(runtime.Object)
			filler.Fill(obj)
			want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatalf("%v: ToUnstructured: %v", gvk, err)
			}
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatalf("%v: %v", gvk, err)
			}
			var got map[string]any
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, &got); err != nil {
				t.Fatalf("%v: %v", gvk, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v: the JSON round trip differs from ToUnstructured\n  json: %#v\n  ToUnstructured: %#v", gvk, got, want)
			}
		}
	}
	t.Logf("%d kinds take the JSON round trip", accepted)
	for _, obj := range []runtime.Object{&corev1.Pod{}, &appsv1.Deployment{}, &corev1.ConfigMap{}, &batchv1.Job{}, &corev1.Service{}} {
		if !jsonRoundTripExact(reflect.TypeOf(obj)) {
			t.Errorf("%T does not take the JSON round trip", obj)
		}
	}
}

// newObjectFiller fills typed objects randomly, with valid values for the
// types whose encodings are hand-written.
func newObjectFiller() *randfill.Filler {
	quantities := []string{"0", "1", "100m", "0.5", "1Gi", "128974848", "1e3", "2.5Mi", "-3"}
	return randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 2).MaxDepth(12).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse(quantities[c.Intn(len(quantities))])
		},
		func(tm *metav1.Time, c randfill.Continue) {
			*tm = metav1.NewTime(time.Unix(c.Int63n(4e9), 0))
		},
		func(tm *metav1.MicroTime, c randfill.Continue) {
			*tm = metav1.NewMicroTime(time.Unix(c.Int63n(4e9), c.Int63n(1e9)))
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31())
			} else {
				*v = intstr.FromString(c.String(5))
			}
		},
		func(f *float64, c randfill.Continue) {
			// Integral values are where a float field's JSON and
			// ToUnstructured part ways (no built-in kind has a float
			// field today; jsonRoundTripExact declines them anyway).
			*f = float64(c.Intn(4))
		},
		func(r *runtime.RawExtension, c randfill.Continue) {
			r.Raw = []byte(`{"a":2.0,"b":[1,"x"]}`)
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.Raw = []byte(`{"f:metadata":{"f:labels":{".":{}}}}`)
		},
	)
}

// TestTypedFromUnstructured checks typedFromUnstructured against the
// scheme's ConvertToVersion on the unstructured content of randomly filled
// objects of every kind it accepts.
func TestTypedFromUnstructured(t *testing.T) {
	e := compile(t, sidecarJSONPatch)
	filler := newObjectFiller()
	for gvk, typ := range objectScheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || !jsonRoundTripExact(reflect.PointerTo(typ)) {
			continue
		}
		for i := 0; i < 10; i++ {
			obj := reflect.New(typ).Interface().(runtime.Object)
			filler.Fill(obj)
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: content}
			u.SetGroupVersionKind(gvk)
			want, err := e.scheme.ConvertToVersion(u.DeepCopy(), gvk.GroupVersion())
			if err != nil {
				t.Fatalf("%v: ConvertToVersion: %v", gvk, err)
			}
			got, ok := e.typedFromUnstructured(u, gvk, gvk)
			if !ok {
				t.Fatalf("%v: declined", gvk)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v: differs from ConvertToVersion\n  got  %#v\n  want %#v", gvk, got, want)
			}
		}
	}
	// A value the JSON decoder refuses is declined, not truncated.
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": map[string]any{"replicas": 1.5}}}
	gvk := u.GroupVersionKind()
	if _, ok := e.typedFromUnstructured(u, gvk, gvk); ok {
		t.Fatal("replicas 1.5 was accepted")
	}
}
