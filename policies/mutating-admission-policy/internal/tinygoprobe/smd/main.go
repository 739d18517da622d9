// Command smd is a TinyGo probe (see package tinygoprobe): structured-merge-diff
// merging an apply configuration into an object as a MAP ApplyConfiguration
// mutation does (a list-map keyed by name, an atomic list), printing the merged
// object with value.ToJSON and its field set in the managed-fields encoding.
package main

import (
	"bytes"
	"fmt"
	"os"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

func ptr[T any](v T) *T { return &v }

// podTypes are a tiny Pod: spec.containers a list-map keyed by name, each with
// an image and atomic args.
var podTypes = []schema.TypeDef{
	{Name: "pod", Atom: schema.Atom{Map: &schema.Map{Fields: []schema.StructField{
		{Name: "spec", Type: schema.TypeRef{NamedType: ptr("spec")}},
	}}}},
	{Name: "spec", Atom: schema.Atom{Map: &schema.Map{Fields: []schema.StructField{
		{Name: "containers", Type: schema.TypeRef{Inlined: schema.Atom{List: &schema.List{
			ElementType:         schema.TypeRef{NamedType: ptr("container")},
			ElementRelationship: schema.Associative,
			Keys:                []string{"name"},
		}}}},
	}}}},
	{Name: "container", Atom: schema.Atom{Map: &schema.Map{Fields: []schema.StructField{
		{Name: "name", Type: schema.TypeRef{NamedType: ptr("string")}},
		{Name: "image", Type: schema.TypeRef{NamedType: ptr("string")}},
		{Name: "args", Type: schema.TypeRef{Inlined: schema.Atom{List: &schema.List{
			ElementType:         schema.TypeRef{NamedType: ptr("string")},
			ElementRelationship: schema.Atomic,
		}}}},
	}}}},
	{Name: "string", Atom: schema.Atom{Scalar: ptr(schema.String)}},
}

func main() {
	parser := &typed.Parser{Schema: schema.Schema{Types: podTypes}}
	pt := parser.Type("pod")
	obj, err := pt.FromUnstructured(map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": "a", "image": "a:1", "args": []any{"x"}},
	}}})
	if err != nil {
		fail("FromUnstructured", err)
	}
	patch, err := pt.FromUnstructured(map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": "a", "image": "a:2"},
		map[string]any{"name": "b", "image": "b:1"},
	}}})
	if err != nil {
		fail("FromUnstructured patch", err)
	}
	merged, err := obj.Merge(patch)
	if err != nil {
		fail("Merge", err)
	}
	out, err := value.ToJSON(merged.AsValue())
	if err != nil {
		fail("ToJSON", err)
	}
	want := `{"spec":{"containers":[{"args":["x"],"image":"a:2","name":"a"},{"image":"b:1","name":"b"}]}}`
	if string(out) != want {
		fail("Merge result", fmt.Errorf("got %s, want %s", out, want))
	}
	set, err := merged.ToFieldSet()
	if err != nil {
		fail("ToFieldSet", err)
	}
	// the managed-fields encoding of the set (fieldpath's JSON code) and back
	setJSON, err := set.ToJSON()
	if err != nil {
		fail("Set.ToJSON", err)
	}
	wantSet := `{"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:args":{},"f:image":{},"f:name":{}},"k:{\"name\":\"b\"}":{".":{},"f:image":{},"f:name":{}}}}}`
	if string(setJSON) != wantSet { // as the pristine module writes it
		fail("Set.ToJSON", fmt.Errorf("got %s, want %s", setJSON, wantSet))
	}
	var back fieldpath.Set
	if err := back.FromJSON(bytes.NewReader(setJSON)); err != nil {
		fail("Set.FromJSON", err)
	}
	if !back.Equals(set) {
		fail("Set.FromJSON", fmt.Errorf("%s does not decode to the same set", setJSON))
	}
	fmt.Println("ok", string(out), string(setJSON))
}

func fail(step string, err error) {
	fmt.Println("FAIL", step+":", err)
	os.Exit(1)
}
