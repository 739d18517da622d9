package controller

import (
	"encoding/json"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestFieldsOf: the FieldsV1 tree picks fields ("f:"), keyed list items ("k:", in their stored
// order), set items ("v:") and indexed items ("i:"); leaves take their whole value; what the tree
// does not name (another manager's fields) is left out.
func TestFieldsOf(t *testing.T) {
	var obj, fields, want map[string]any
	for _, x := range []struct {
		s string
		v *map[string]any
	}{
		{`{"metadata":{"labels":{"a":"1","theirs":"x"}},"spec":{"replicas":2,
		  "containers":[{"name":"sidecar","image":"s"},{"name":"main","image":"m","env":[{"name":"B","value":"2"},{"name":"THEIRS","value":"t"},{"name":"A","value":"1"}],
		    "ports":[{"containerPort":8443,"protocol":"TCP","name":"https"}]}],
		  "finalizers":["x","y"],"args":["serve","--x"],"emptyDir":{}}}`, &obj},
		{`{"f:metadata":{"f:labels":{"f:a":{}}},"f:spec":{"f:replicas":{},
		  "f:containers":{"k:{\"name\":\"main\"}":{".":{},"f:name":{},"f:image":{},
		    "f:env":{"k:{\"name\":\"A\"}":{".":{},"f:name":{},"f:value":{}},"k:{\"name\":\"B\"}":{".":{},"f:name":{},"f:value":{}}},
		    "f:ports":{"k:{\"containerPort\":8443,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}}}},
		  "f:finalizers":{"v:\"y\"":{}},"f:args":{},"f:emptyDir":{},"f:gone":{}}}`, &fields},
		{`{"metadata":{"labels":{"a":"1"}},"spec":{"replicas":2,
		  "containers":[{"name":"main","image":"m","env":[{"name":"B","value":"2"},{"name":"A","value":"1"}],
		    "ports":[{"containerPort":8443,"protocol":"TCP"}]}],
		  "finalizers":["y"],"args":["serve","--x"],"emptyDir":{}}}`, &want},
	} {
		if err := json.Unmarshal([]byte(x.s), x.v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fieldsOf(obj, fields)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, any(want)) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("fieldsOf:\n got %s\nwant %s", g, w)
	}
	if _, err := fieldsOf(map[string]any{"l": []any{}}, map[string]any{"f:l": map[string]any{"k:{bad": map[string]any{}}}); err == nil {
		t.Error("a malformed list key: no error")
	}
}

// BenchmarkUnchangedDeployment is what a reconcile of an unchanged Deployment costs in
// applyOwned: the desired object as an apply configuration, the owned fields extracted from the
// stored one, and their comparison (no request).
func BenchmarkUnchangedDeployment(b *testing.B) {
	ps := psObj("p")
	e := newPSEnv(b, ps)
	if _, err := e.r.Reconcile(e.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}); err != nil {
		b.Fatal(err)
	}
	live := &appsv1.Deployment{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: psTestNS, Name: "policy-server-p"}, live); err != nil {
		b.Fatal(err)
	}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: "p"}, ps); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		desired := e.r.desiredDeployment(ps)
		if err := controllerutil.SetControllerReference(ps, desired, e.c.Scheme()); err != nil {
			b.Fatal(err)
		}
		wrote, err := applyOwned(e.ctx, e.c, desired, live)
		if err != nil || wrote {
			b.Fatalf("wrote %v, err %v", wrote, err)
		}
	}
}
