package mutators

import (
	"testing"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/tester"
)

// TestMutateReportsChange: Mutate's changed is false exactly when the
// object is Equal to what it was (the convergence loop then skips an
// encoding), and semantic is true exactly when it changed as a JSON value,
// for each kind of write: a setter's value, a created key, a
// keyed-list element, a set's merge and prune, an image.
func TestMutateReportsChange(t *testing.T) {
	const obj = `{"metadata":{"labels":{"app":"web"}},"spec":{"list":["a","b"],"n":1,` +
		`"containers":[{"name":"a","image":"docker.io/nginx:1"},{"name":"b","image":"busybox"}]}}`
	str := func(s string) *jsonv.Value { return jsonv.NewString(s) }
	// The object is read as a request's (integers kept), values as a
	// mutator's (numbers float64).
	parse := func(s string, mode jsonv.NumberMode) *jsonv.Value {
		v, err := jsonv.Parse([]byte(s), mode)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name, location string
		setter         Setter
		changed        bool
	}{
		{"same value", "metadata.labels.app", defaultSetter{str("web")}, false},
		{"other value", "metadata.labels.app", defaultSetter{str("api")}, true},
		{"new key", "metadata.labels.tier", defaultSetter{str("x")}, true},
		{"new intermediate objects", "spec.a.b", defaultSetter{str("x")}, true},
		{"int to float is a change", "spec.n", defaultSetter{jsonv.NewFloat(1)}, true},
		{"keyed element, equal", "spec.containers[name: b]", defaultSetter{parse(`{"name":"b","image":"busybox"}`, jsonv.AllFloat)}, false},
		{"keyed element, other", "spec.containers[name: b]", defaultSetter{parse(`{"name":"b","image":"alpine"}`, jsonv.AllFloat)}, true},
		{"keyed element, new", "spec.containers[name: c]", defaultSetter{parse(`{"name":"c"}`, jsonv.AllFloat)}, true},
		{"glob, one element renamed", "spec.containers[name: *].name", defaultSetter{str("a")}, true},
		{"field of a keyed element, same", "spec.containers[name: b].image", defaultSetter{str("busybox")}, false},
		{"new keyed element by a field", "spec.containers[name: c].image", defaultSetter{str("busybox")}, true},
		{"merge, present", "spec.list", setSetter{values: []*jsonv.Value{str("a")}}, false},
		{"merge, new", "spec.list", setSetter{values: []*jsonv.Value{str("c")}}, true},
		{"prune, absent", "spec.list", setSetter{prune: true, values: []*jsonv.Value{str("z")}}, false},
		{"prune, present", "spec.list", setSetter{prune: true, values: []*jsonv.Value{str("a")}}, true},
		{"prune of a missing list", "spec.none", setSetter{prune: true, values: []*jsonv.Value{str("a")}}, false},
		{"image, same", "spec.containers[name: a].image", imageSetter{domain: "docker.io", path: "nginx", tag: ":1"}, false},
		{"image, other tag", "spec.containers[name: a].image", imageSetter{tag: ":2"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := parser.Parse(c.location)
			if err != nil {
				t.Fatal(err)
			}
			tt, err := tester.New(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			o := parse(obj, jsonv.IntsPreserved)
			before, beforeJSON := string(jsonv.AppendTyped(nil, o)), string(jsonv.AppendSemantic(nil, o))
			mutated, changed, semantic, err := Mutate(p, tt, c.setter, o)
			if err != nil || !mutated {
				t.Fatalf("Mutate: mutated %v, %v", mutated, err)
			}
			after, afterJSON := string(jsonv.AppendTyped(nil, o)), string(jsonv.AppendSemantic(nil, o))
			if changed != c.changed || changed != (before != after) {
				t.Fatalf("changed = %v, want %v (the object went from %s to %s)", changed, c.changed, before, after)
			}
			if semantic != (beforeJSON != afterJSON) {
				t.Fatalf("semantic = %v, but the object went from %s to %s as JSON values", semantic, beforeJSON, afterJSON)
			}
		})
	}
}
