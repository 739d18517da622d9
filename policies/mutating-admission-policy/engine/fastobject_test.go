package engine

import (
	"reflect"
	"testing"

	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
)

// TestObjectValue compares objectValue with what the apiserver's patchers
// use, CheckTypeNamesMatchFieldPathNames and Value(), on the values of apply
// configuration expressions.
func TestObjectValue(t *testing.T) {
	for _, c := range []struct {
		expr string
		ok   bool // objectValue vouches for it
	}{
		{`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`, true},
		{`Object{spec: Object.spec{replicas: 3, paused: true, minReadySeconds: 2}}`, true},
		{`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "a", image: "b", args: ["x"]}]}}}}`, true},
		{`Object{spec: Object.spec{x: [["a"]]}}`, false}, // a list in a list: the apiserver keeps the inner one as CEL values
		{`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "a", image: "b"}]}}}}`, true},
		{`Object{metadata: Object.metadata{annotations: {}, finalizers: []}}`, true},
		{`Object{metadata: Object.metadata{labels: {"a": "b"}, finalizers: ["x", "y"]}}`, true},
		{`Object{spec: Object.spec{x: 1.5}}`, true},
		{`Object{spec: Object.metadata{replicas: 3}}`, false},                        // wrong type name: the apiserver's type mismatch
		{`Object{spec: Object.spec{template: Object.spec{}}}`, false},                // wrong nested type name
		{`Object{metadata: Object.metadata{labels: object.metadata.labels}}`, false}, // a value from the object: declined
		{`Object{metadata: Object.metadata{labels: {1: "b"}}}`, false},               // not a string key
		{`Object{spec: Object.spec{x: null}}`, false},
		{`Object{spec: Object.spec{x: b"bytes"}}`, false},
	} {
		t.Run(c.expr, func(t *testing.T) {
			e := compile(t, policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: '`+c.expr+`'}`))
			val, _, err := e.evaluator.mutations[0].result.Program.Eval(map[string]any{
				"object": map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "b"}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			ov := val.(*dynamic.ObjectVal)
			got, ok := objectValue(ov)
			if ok != c.ok {
				t.Fatalf("ok=%v, want %v", ok, c.ok)
			}
			checkErr := ov.CheckTypeNamesMatchFieldPathNames()
			if !ok {
				return
			}
			if checkErr != nil {
				t.Fatalf("vouched for a value the apiserver's type check refuses: %v", checkErr)
			}
			if want := ov.Value(); !reflect.DeepEqual(got, want) {
				t.Fatalf("objectValue\n  %#v\nValue()\n  %#v", got, want)
			}
		})
	}
	if objectFieldsOffset == ^uintptr(0) {
		t.Fatal("dynamic.ObjectVal has no `fields map[string]ref.Val` any more: the fast path declines every apply configuration")
	}
}
