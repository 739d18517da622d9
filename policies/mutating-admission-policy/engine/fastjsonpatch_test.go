package engine

import (
	gojson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	sigsjson "sigs.k8s.io/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/mutation"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
	"k8s.io/utils/ptr"
)

// The reference: what k8s.io/apiserver .../mutating/patch/json_patch.go does,
// step by step, with the same libraries.

// refBuildPatch is evaluatePatchExpression after the evaluation: the
// conversion of the expression's value into a jsonpatch.Patch.
func refBuildPatch(val ref.Val) (jsonpatch.Patch, error) {
	iter, ok := val.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array")
	}
	result := jsonpatch.Patch{}
	for it := iter.Iterator(); it.HasNext() == types.True; {
		v := it.Next()
		patchObj, err := v.ConvertToNative(reflect.TypeOf(&mutation.JSONPatchVal{}))
		if err != nil {
			return nil, err
		}
		op, ok := patchObj.(*mutation.JSONPatchVal)
		if !ok {
			return nil, fmt.Errorf("got element of %T", patchObj)
		}
		resultOp := jsonpatch.Operation{}
		resultOp["op"] = ptr.To(gojson.RawMessage(strconv.Quote(op.Op)))
		resultOp["path"] = ptr.To(gojson.RawMessage(strconv.Quote(op.Path)))
		if len(op.From) > 0 {
			resultOp["from"] = ptr.To(gojson.RawMessage(strconv.Quote(op.From)))
		}
		if op.Val != nil {
			if objVal, ok := op.Val.(*dynamic.ObjectVal); ok {
				if err := objVal.CheckTypeNamesMatchFieldPathNames(); err != nil {
					return nil, fmt.Errorf("type mismatch: %w", err)
				}
			}
			v, err := op.Val.ConvertToNative(reflect.TypeOf(&structpb.Value{}))
			if err != nil {
				return nil, err
			}
			b, err := gojson.Marshal(v)
			if err != nil {
				return nil, err
			}
			resultOp["value"] = ptr.To[gojson.RawMessage](b)
		}
		result = append(result, resultOp)
	}
	return result, nil
}

// refApply is Patch.Apply on doc's JSON encoding, decoded back; a panic of
// the library (it has some) is an error.
func refApply(doc map[string]any, p jsonpatch.Patch) (out map[string]any, testFailed bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, testFailed, err = nil, false, fmt.Errorf("panic: %v", r)
		}
	}()
	js, err := gojson.Marshal(doc)
	if err != nil {
		return nil, false, err
	}
	patched, err := p.Apply(js)
	if err != nil {
		if errors.Is(err, jsonpatch.ErrTestFailed) {
			return nil, true, nil
		}
		return nil, false, err
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(patched, &out); err != nil {
		return nil, false, err
	}
	return out, false, nil
}

// refOps reads back the operations of a built patch, values decoded as the
// strict serializer would.
func refOps(p jsonpatch.Patch) ([]jsonPatchOp, error) {
	var ops []jsonPatchOp
	for _, o := range p {
		op := jsonPatchOp{op: o.Kind()}
		var err error
		if op.path, err = o.Path(); err != nil {
			return nil, err
		}
		if _, ok := o["from"]; ok {
			if op.from, err = o.From(); err != nil {
				return nil, err
			}
		}
		if raw, ok := o["value"]; ok {
			op.hasValue = true
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(*raw, &op.value); err != nil {
				return nil, err
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// refPatchFromOps builds what the apiserver would build for ops whose
// values are native: structpb.NewValue then encoding/json (protojson).
func refPatchFromOps(ops []jsonPatchOp) (jsonpatch.Patch, error) {
	p := jsonpatch.Patch{}
	for _, op := range ops {
		o := jsonpatch.Operation{}
		o["op"] = ptr.To(gojson.RawMessage(strconv.Quote(op.op)))
		o["path"] = ptr.To(gojson.RawMessage(strconv.Quote(op.path)))
		if op.from != "" {
			o["from"] = ptr.To(gojson.RawMessage(strconv.Quote(op.from)))
		}
		if op.hasValue {
			v, err := structpb.NewValue(op.value)
			if err != nil {
				return nil, err
			}
			b, err := gojson.Marshal(v)
			if err != nil {
				return nil, err
			}
			o["value"] = ptr.To[gojson.RawMessage](b)
		}
		p = append(p, o)
	}
	return p, nil
}

var (
	jpCompilerOnce sync.Once
	jpCompiler     *plugincel.CompositedCompiler
)

// jpCompile compiles expr as a JSONPatch mutation expression with the
// engine's compiler and options.
func jpCompile(expr string) plugincel.CompilationResult {
	jpCompilerOnce.Do(func() {
		var err error
		jpCompiler, err = plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		if err != nil {
			panic(err)
		}
	})
	return jpCompiler.CompileCELExpression(&patch.JSONPatchCondition{Expression: expr},
		plugincel.OptionalVariableDeclarations{HasPatchTypes: true}, environment.StoredExpressions)
}

// evalJSONPatch compiles expr as a JSONPatch mutation expression with the
// engine's compiler and evaluates it with object bound to doc.
func evalJSONPatch(t testing.TB, expr string, doc map[string]any) ref.Val {
	t.Helper()
	res := jpCompile(expr)
	if res.Error != nil {
		t.Fatalf("compile %s: %v", expr, res.Error)
	}
	val, _, err := res.Program.Eval(map[string]any{"object": doc})
	if err != nil {
		t.Fatalf("eval %s: %v", expr, err)
	}
	return val
}

func mustDoc(t testing.TB, js string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(js), &m); err != nil {
		t.Fatalf("doc %s: %v", js, err)
	}
	return m
}

const (
	wantOK         = "ok"         // fast path taken, equal to the reference
	wantTestFailed = "testFailed" // fast path: a failed test, as the reference
	wantError      = "error"      // the reference fails; the fast path declines
	wantDecline    = "decline"    // the reference succeeds; the fast path declines (conservative)
)

const jpPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"myapp","namespace":"default","creationTimestamp":null,
"labels":{"app":"web","a/b":"x","c~d":"y"},"annotations":{"note":"<b>&"}},
"spec":{"replicas":1,"ratio":1.5,"initContainers":[{"name":"init","image":"busybox"}],
"containers":[{"name":"app","image":"nginx","args":["a",null]},{"name":"side","image":"envoy"}],"empty":{},"none":[]}}`

func TestFastJSONPatch(t *testing.T) {
	cases := []struct {
		name, doc, expr, want string
	}{
		// The common cases: the fast path must be taken.
		{"sidecar: add an Object at initContainers/-", jpPod, `[JSONPatch{op: "add", path: "/spec/initContainers/-",
			value: Object.spec.initContainers{name: "mesh-proxy", image: "mesh/proxy:v1.0.0", args: ["proxy", "sidecar"], restartPolicy: "Always"}}]`, wantOK},
		{"add a label with escapeKey", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("k8s.io/x~y"), value: "true"}]`, wantOK},
		{"add an annotation with escapeKey", jpPod, `[JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("example.com/owner"), value: "team-a"}]`, wantOK},
		{"replace replicas with an int", jpPod, `[JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`, wantOK},
		{"add a map value", jpPod, `[JSONPatch{op: "add", path: "/spec/nodeSelector", value: {"disk": "ssd", "zone": "a"}}]`, wantOK},
		{"remove an existing key", jpPod, `[JSONPatch{op: "remove", path: "/metadata/labels/app"}]`, wantOK},
		{"passing test then replace", jpPod, `[JSONPatch{op: "test", path: "/spec/replicas", value: 1}, JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`, wantOK},
		{"failing test", jpPod, `[JSONPatch{op: "test", path: "/spec/replicas", value: 100}, JSONPatch{op: "replace", path: "/spec/replicas", value: 3}]`, wantTestFailed},
		{"no ops", jpPod, `[JSONPatch{op: "add", path: "/x", value: 1}].filter(p, false)`, wantOK},
		{"several ops on one map", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/x", value: "1"}, JSONPatch{op: "add", path: "/metadata/labels/y", value: "2"}, JSONPatch{op: "remove", path: "/metadata/labels/x"}]`, wantOK},
		{"ops computed from the object", jpPod, `object.spec.containers.map(c, JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("img/" + c.name), value: c.image})`, wantOK},

		// add
		{"add under a missing parent", jpPod, `[JSONPatch{op: "add", path: "/metadata/nolabels/x", value: "1"}]`, wantError},
		{"add under null", jpPod, `[JSONPatch{op: "add", path: "/metadata/creationTimestamp/x", value: "1"}]`, wantError},
		{"add under a string", jpPod, `[JSONPatch{op: "add", path: "/metadata/name/x", value: "1"}]`, wantError},
		{"add over an existing key", jpPod, `[JSONPatch{op: "add", path: "/metadata/name", value: "other"}]`, wantOK},
		{"add at index 0", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/0", value: {"name": "first"}}]`, wantOK},
		{"add at index 1", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/1", value: {"name": "mid"}}]`, wantOK},
		{"add at index == len", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/2", value: {"name": "last"}}]`, wantOK},
		{"add at index > len", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/3", value: {"name": "x"}}]`, wantError},
		{"add - to an empty list", jpPod, `[JSONPatch{op: "add", path: "/spec/none/-", value: 1}]`, wantOK},
		{"add - as an object key", jpPod, `[JSONPatch{op: "add", path: "/spec/empty/-", value: 1}]`, wantOK},
		{"add into an element", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/1/args", value: ["x"]}]`, wantOK},
		{"add twice into one list", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/0/args/-", value: "b"}, JSONPatch{op: "add", path: "/spec/containers/0/args/0", value: "z"}]`, wantOK},
		{"add without value adds null", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/x"}]`, wantOK},
		{"add with an explicit null", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/x", value: null}]`, wantDecline},
		{"add a leading-zero index", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/01", value: {"name": "x"}}]`, wantDecline},
		{"add a negative index", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/-1", value: {"name": "x"}}]`, wantDecline},
		{"add to the root", jpPod, `[JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"add /kind", jpPod, `[JSONPatch{op: "add", path: "/kind", value: "Foo"}]`, wantDecline},
		{"replace /apiVersion", jpPod, `[JSONPatch{op: "replace", path: "/apiVersion", value: "v2"}]`, wantDecline},
		{"replace the root", jpPod, `[JSONPatch{op: "replace", path: "", value: {"a": 1}}]`, wantDecline},
		{"path without a slash", jpPod, `[JSONPatch{op: "add", path: "spec/x", value: 1}]`, wantDecline},
		{"path with an empty token", jpPod, `[JSONPatch{op: "add", path: "/metadata//x", value: 1}]`, wantError},

		// replace
		{"replace a missing key adds it", jpPod, `[JSONPatch{op: "replace", path: "/spec/nosuch", value: 5}]`, wantOK},
		{"replace an element", jpPod, `[JSONPatch{op: "replace", path: "/spec/containers/1/image", value: "envoy:2"}]`, wantOK},
		{"replace an index", jpPod, `[JSONPatch{op: "replace", path: "/spec/containers/0", value: {"name": "new"}}]`, wantOK},
		{"replace index == len", jpPod, `[JSONPatch{op: "replace", path: "/spec/containers/2", value: {"name": "new"}}]`, wantError},
		{"replace -", jpPod, `[JSONPatch{op: "replace", path: "/spec/containers/-", value: {"name": "new"}}]`, wantError},
		{"replace without value", jpPod, `[JSONPatch{op: "replace", path: "/spec/replicas"}]`, wantOK},
		{"replace under a missing parent", jpPod, `[JSONPatch{op: "replace", path: "/status/phase", value: "x"}]`, wantError},

		// remove
		{"remove a missing key", jpPod, `[JSONPatch{op: "remove", path: "/spec/nosuch"}]`, wantError},
		{"remove an element", jpPod, `[JSONPatch{op: "remove", path: "/spec/containers/0"}]`, wantOK},
		{"remove the last element", jpPod, `[JSONPatch{op: "remove", path: "/spec/containers/1"}]`, wantOK},
		{"remove out of range", jpPod, `[JSONPatch{op: "remove", path: "/spec/containers/2"}]`, wantError},
		{"remove -", jpPod, `[JSONPatch{op: "remove", path: "/spec/containers/-"}]`, wantError},
		{"remove a null", jpPod, `[JSONPatch{op: "remove", path: "/metadata/creationTimestamp"}]`, wantOK},

		// escapes
		{"escaped key ~1", jpPod, `[JSONPatch{op: "replace", path: "/metadata/labels/a~1b", value: "z"}]`, wantOK},
		{"escaped key ~0", jpPod, `[JSONPatch{op: "remove", path: "/metadata/labels/c~0d"}]`, wantOK},
		{"escapes ~01 and ~10", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/~01~10", value: "z"}]`, wantOK},
		{"unknown escape ~2", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/a~2", value: "z"}]`, wantDecline},
		{"trailing ~", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/a~", value: "z"}]`, wantDecline},
		{"non-ASCII key", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/é", value: "z"}]`, wantDecline},
		{"quote in a key", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/a\"b", value: "z"}]`, wantOK},

		// values of every type
		{"int", jpPod, `[JSONPatch{op: "add", path: "/x", value: -42}]`, wantOK},
		{"int 2^53-1", jpPod, `[JSONPatch{op: "add", path: "/x", value: 9007199254740991}]`, wantOK},
		{"int 2^53+1 becomes a string", jpPod, `[JSONPatch{op: "add", path: "/x", value: 9007199254740993}]`, wantOK},
		{"uint", jpPod, `[JSONPatch{op: "add", path: "/x", value: 7u}]`, wantOK},
		{"double integral", jpPod, `[JSONPatch{op: "add", path: "/x", value: 2.0}]`, wantOK},
		{"double", jpPod, `[JSONPatch{op: "add", path: "/x", value: 2.5}]`, wantOK},
		{"double tiny", jpPod, `[JSONPatch{op: "add", path: "/x", value: 1e-7}]`, wantOK},
		{"double 1e20", jpPod, `[JSONPatch{op: "add", path: "/x", value: 1e20}]`, wantDecline},
		{"double 1e300", jpPod, `[JSONPatch{op: "add", path: "/x", value: 1e300}]`, wantDecline},
		{"double -0", jpPod, `[JSONPatch{op: "add", path: "/x", value: -0.0}]`, wantDecline},
		{"double NaN", jpPod, `[JSONPatch{op: "add", path: "/x", value: double("NaN")}]`, wantError},
		{"double Inf", jpPod, `[JSONPatch{op: "add", path: "/x", value: double("Infinity")}]`, wantError},
		{"bool", jpPod, `[JSONPatch{op: "add", path: "/x", value: true}]`, wantOK},
		{"string with escapes", jpPod, `[JSONPatch{op: "add", path: "/x", value: "a\"b\\c<d>&\u2028\n\x01é"}]`, wantOK},
		{"bytes become base64", jpPod, `[JSONPatch{op: "add", path: "/x", value: b"abc\xff"}]`, wantOK},
		{"timestamp becomes a string", jpPod, `[JSONPatch{op: "add", path: "/x", value: timestamp("2024-01-02T03:04:05.5Z")}]`, wantOK},
		{"duration becomes a string", jpPod, `[JSONPatch{op: "add", path: "/x", value: duration("90s")}]`, wantOK},
		{"list of mixed", jpPod, `[JSONPatch{op: "add", path: "/x", value: [dyn(1), dyn("a"), dyn(true), dyn(2.5), dyn(null), dyn([dyn(1), dyn([2])]), dyn({"k": "v"})]}]`, wantOK},
		{"empty list and map", jpPod, `[JSONPatch{op: "add", path: "/x", value: {"l": dyn([]), "m": dyn({})}}]`, wantOK},
		{"map with a null", jpPod, `[JSONPatch{op: "add", path: "/x", value: {"a": null}}]`, wantOK},
		{"map with int keys", jpPod, `[JSONPatch{op: "add", path: "/x", value: {1: "a"}}]`, wantError},
		{"value from the object", jpPod, `[JSONPatch{op: "add", path: "/spec/containers/-", value: object.spec.containers[0]}]`, wantOK},
		{"object's list with a null", jpPod, `[JSONPatch{op: "add", path: "/x", value: object.spec.containers[0].args}]`, wantOK},
		{"optional value", jpPod, `[JSONPatch{op: "add", path: "/x", value: optional.of(1)}]`, wantOK},
		{"Object nested", jpPod, `[JSONPatch{op: "add", path: "/spec/initContainers/-", value: Object.spec.initContainers{name: "p",
			securityContext: Object.spec.initContainers.securityContext{runAsUser: 1000, runAsNonRoot: true},
			env: [Object.spec.initContainers.env{name: "A", value: "1"}], resources: Object.spec.initContainers.resources{limits: {"cpu": "1"}}}}]`, wantOK},
		{"Object with a wrong type name", jpPod, `[JSONPatch{op: "add", path: "/spec/initContainers/-", value: Object.spec.initContainers{securityContext: Object.spec.wrong{runAsUser: 1}}}]`, wantError},
		{"Object with a list of lists", jpPod, `[JSONPatch{op: "add", path: "/spec/x", value: Object.spec.x{a: [[1]]}}]`, wantError},
		{"Object with a null in a list", jpPod, `[JSONPatch{op: "add", path: "/spec/x", value: Object.spec.x{a: [null]}}]`, wantError},
		{"Object with doubles", jpPod, `[JSONPatch{op: "add", path: "/spec/x", value: Object.spec.x{a: 2.0, b: 2.5, c: [3.0]}}]`, wantOK},

		// test
		{"test 1 against CEL 1.0", jpPod, `[JSONPatch{op: "test", path: "/spec/replicas", value: 1.0}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test 1.5", jpPod, `[JSONPatch{op: "test", path: "/spec/ratio", value: 1.5}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test 1.5 against 1", jpPod, `[JSONPatch{op: "test", path: "/spec/ratio", value: 1}]`, wantTestFailed},
		{"test a string", jpPod, `[JSONPatch{op: "test", path: "/metadata/name", value: "myapp"}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test a string against a number", jpPod, `[JSONPatch{op: "test", path: "/spec/replicas", value: "1"}]`, wantTestFailed},
		{"test an equal string with HTML characters", jpPod, `[JSONPatch{op: "test", path: "/metadata/annotations/note", value: "<b>&"}]`, wantDecline},
		{"test an unequal string with HTML characters", jpPod, `[JSONPatch{op: "test", path: "/metadata/annotations/note", value: "<i>&"}]`, wantTestFailed},
		{"test a missing key with a value", jpPod, `[JSONPatch{op: "test", path: "/metadata/labels/nosuch", value: "x"}]`, wantTestFailed},
		{"test a missing key without value", jpPod, `[JSONPatch{op: "test", path: "/metadata/labels/nosuch"}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test null without value", jpPod, `[JSONPatch{op: "test", path: "/metadata/creationTimestamp"}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test null with a value", jpPod, `[JSONPatch{op: "test", path: "/metadata/creationTimestamp", value: "x"}]`, wantTestFailed},
		{"test null with null", jpPod, `[JSONPatch{op: "test", path: "/metadata/creationTimestamp", value: null}]`, wantDecline},
		{"test a present key without value", jpPod, `[JSONPatch{op: "test", path: "/metadata/name"}]`, wantTestFailed},
		{"test under a missing parent", jpPod, `[JSONPatch{op: "test", path: "/status/phase", value: "x"}]`, wantError},
		{"test an index out of range", jpPod, `[JSONPatch{op: "test", path: "/spec/containers/5", value: "x"}]`, wantError},
		{"test an Object", jpPod, `[JSONPatch{op: "test", path: "/spec/containers/1", value: Object.spec.containers{name: "side", image: "envoy"}}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test an Object with a field less", jpPod, `[JSONPatch{op: "test", path: "/spec/containers/1", value: Object.spec.containers{name: "side"}}]`, wantTestFailed},
		{"test a map", jpPod, `[JSONPatch{op: "test", path: "/metadata/labels", value: {"app": "web", "a/b": "x", "c~d": "y"}}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test a map with another value", jpPod, `[JSONPatch{op: "test", path: "/metadata/labels", value: {"app": "web", "a/b": "x", "c~d": "z"}}]`, wantTestFailed},
		{"test a list", jpPod, `[JSONPatch{op: "test", path: "/spec/containers/1", value: {"name": "side", "image": "envoy"}}, JSONPatch{op: "test", path: "/spec/none", value: []}, JSONPatch{op: "add", path: "/x", value: 1}]`, wantOK},
		{"test a list with a null", jpPod, `[JSONPatch{op: "test", path: "/spec/containers/0/args", value: ["a", "b"]}]`, wantError},
		{"test a list of other length", jpPod, `[JSONPatch{op: "test", path: "/spec/containers/0/args", value: ["a"]}]`, wantTestFailed},
		{"test {} against []", jpPod, `[JSONPatch{op: "test", path: "/spec/empty", value: []}]`, wantTestFailed},
		{"test [] against {}", jpPod, `[JSONPatch{op: "test", path: "/spec/none", value: {}}]`, wantTestFailed},
		{"test an added value", jpPod, `[JSONPatch{op: "add", path: "/x", value: {"a": [dyn(1), dyn(2.5)]}}, JSONPatch{op: "test", path: "/x", value: {"a": [1.0, 2.5]}}]`, wantOK},

		// move and copy
		{"move a label to an annotation", jpPod, `[JSONPatch{op: "move", from: "/metadata/labels/app", path: "/metadata/annotations/app"}]`, wantOK},
		{"move an element", jpPod, `[JSONPatch{op: "move", from: "/spec/containers/0", path: "/spec/containers/-"}]`, wantOK},
		{"move from a missing key", jpPod, `[JSONPatch{op: "move", from: "/metadata/labels/nosuch", path: "/metadata/annotations/app"}]`, wantError},
		{"move into itself", jpPod, `[JSONPatch{op: "move", from: "/metadata", path: "/metadata/x"}]`, wantError},
		{"move without from", jpPod, `[JSONPatch{op: "move", path: "/metadata/x"}]`, wantError},
		{"copy an element", jpPod, `[JSONPatch{op: "copy", from: "/spec/containers/0", path: "/spec/containers/-"}, JSONPatch{op: "replace", path: "/spec/containers/2/name", value: "copy"}]`, wantOK},
		{"copy into itself", jpPod, `[JSONPatch{op: "add", path: "/metadata/labels/z", value: "1"}, JSONPatch{op: "copy", from: "/metadata/labels", path: "/metadata/labels/self"}, JSONPatch{op: "add", path: "/metadata/labels/w", value: "2"}]`, wantOK},
		{"copy from a missing key", jpPod, `[JSONPatch{op: "copy", from: "/metadata/labels/nosuch", path: "/metadata/annotations/app"}]`, wantDecline},

		// other ops
		{"unknown op", jpPod, `[JSONPatch{op: "merge", path: "/x", value: 1}]`, wantError},
		{"error after a change", jpPod, `[JSONPatch{op: "add", path: "/x", value: 1}, JSONPatch{op: "remove", path: "/nosuch"}]`, wantError},
		{"test failing after an error", jpPod, `[JSONPatch{op: "remove", path: "/nosuch"}, JSONPatch{op: "test", path: "/spec/replicas", value: 2}]`, wantError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustDoc(t, tc.doc)
			before := mustDoc(t, tc.doc)
			val := evalJSONPatch(t, tc.expr, doc)

			refPatch, refBuildErr := refBuildPatch(val)
			var refOut map[string]any
			var refFailed bool
			refErr := refBuildErr
			if refErr == nil {
				refOut, refFailed, refErr = refApply(doc, refPatch)
			}

			ops, decOK := decodeJSONPatchOps(val)
			if decOK {
				if refBuildErr != nil {
					t.Fatalf("decodeJSONPatchOps ok, the apiserver fails: %v", refBuildErr)
				}
				want, err := refOps(refPatch)
				if err != nil {
					t.Fatal(err)
				}
				if len(want) == 0 {
					want = nil
				}
				if len(ops) == 0 {
					ops = nil
				}
				if !reflect.DeepEqual(ops, want) {
					t.Fatalf("ops\n got %#v\nwant %#v", ops, want)
				}
			}
			var out map[string]any
			var failed, ok bool
			if decOK {
				out, failed, ok = applyJSONPatchOps(doc, ops)
			}
			if !reflect.DeepEqual(doc, before) {
				t.Fatalf("doc modified")
			}
			if ok {
				checkAgainstRef(t, out, failed, refOut, refFailed, refErr)
			}
			switch tc.want {
			case wantOK:
				if !ok || failed {
					t.Fatalf("want the fast path (ok), got ok=%v testFailed=%v decode=%v; reference: err=%v testFailed=%v", ok, failed, decOK, refErr, refFailed)
				}
			case wantTestFailed:
				if !ok || !failed {
					t.Fatalf("want testFailed, got ok=%v testFailed=%v; reference: err=%v", ok, failed, refErr)
				}
			case wantError:
				if refErr == nil {
					t.Fatalf("want a reference error, got out=%v testFailed=%v", refOut, refFailed)
				}
				if ok {
					t.Fatalf("ok on an error")
				}
			case wantDecline:
				if refErr != nil {
					t.Fatalf("want the reference to succeed, got %v", refErr)
				}
				if ok {
					t.Fatalf("want a decline, got ok")
				}
			}
		})
	}
}

// checkAgainstRef: an ok answer is the reference's.
func checkAgainstRef(t testing.TB, out map[string]any, failed bool, refOut map[string]any, refFailed bool, refErr error) {
	t.Helper()
	if refErr != nil {
		t.Fatalf("ok, but the reference fails: %v", refErr)
	}
	if failed != refFailed {
		t.Fatalf("testFailed=%v, reference %v", failed, refFailed)
	}
	if !failed && !reflect.DeepEqual(out, refOut) {
		g, _ := gojson.Marshal(out)
		w, _ := gojson.Marshal(refOut)
		t.Fatalf("result differs\n got %s\nwant %s\n got %#v\nwant %#v", g, w, out, refOut)
	}
}

// TestApplyJSONPatchOpsSharing: doc is not modified, unchanged subtrees are
// shared, changed paths are new.
func TestApplyJSONPatchOpsSharing(t *testing.T) {
	doc := mustDoc(t, jpPod)
	ops := []jsonPatchOp{
		{op: "add", path: "/metadata/labels/x", hasValue: true, value: "1"},
		{op: "add", path: "/metadata/labels/y", hasValue: true, value: "2"},
	}
	out, failed, ok := applyJSONPatchOps(doc, ops)
	if !ok || failed {
		t.Fatalf("ok=%v failed=%v", ok, failed)
	}
	if _, found := doc["metadata"].(map[string]any)["labels"].(map[string]any)["x"]; found {
		t.Fatal("doc modified")
	}
	if mapPointer(out["spec"].(map[string]any)) != mapPointer(doc["spec"].(map[string]any)) {
		t.Error("spec not shared")
	}
	if mapPointer(out["metadata"].(map[string]any)) == mapPointer(doc["metadata"].(map[string]any)) {
		t.Error("metadata shared")
	}
	labels := out["metadata"].(map[string]any)["labels"].(map[string]any)
	if labels["x"] != "1" || labels["y"] != "2" || labels["app"] != "web" {
		t.Errorf("labels %v", labels)
	}
}

// fuzzBytes turns fuzz input into choices; past the end every choice is 0.
type fuzzBytes struct {
	fuzzSource
}

var (
	patchFuzzKeys    = []string{"a", "b", "a/b", "c~d", "~1", "0", "1", "-", "", "metadata", "x y", "<&>"}
	patchFuzzStrings = []string{"", "a", "b", "<b>", "é", "a\"b", "1", "\n"}
	fuzzInts         = []int64{0, 1, -1, 2, 3, 1 << 53, -(1 << 53), 1 << 62, -5}
	fuzzFloats       = []float64{1.5, -2.25, 1e-7, 0.1, 1e19, 2.5e-300}
	fuzzTokens       = []string{"a", "b", "a~1b", "c~0d", "~01", "0", "1", "2", "3", "01", "-1", "-", "", "~2", "~", "é", "x y", "apiVersion", "kind", "metadata", "%7e"}
	fuzzOps          = []string{"add", "remove", "replace", "test", "move", "copy", "add", "replace", "test", "bogus"}
)

// value generates a value in decoded form; forOp keeps to what
// decodeJSONPatchOps can produce (integers within ±2^53).
func (f *fuzzBytes) value(depth int, forOp bool) any {
	k := f.intn(8)
	if depth <= 0 && k < 2 {
		k += 2
	}
	switch k {
	case 0:
		m := map[string]any{}
		for range f.intn(4) {
			m[patchFuzzKeys[f.intn(len(patchFuzzKeys))]] = f.value(depth-1, forOp)
		}
		return m
	case 1:
		l := make([]any, f.intn(4))
		for i := range l {
			l[i] = f.value(depth-1, forOp)
		}
		return l
	case 2:
		return patchFuzzStrings[f.intn(len(patchFuzzStrings))]
	case 3:
		i := fuzzInts[f.intn(len(fuzzInts))]
		if forOp && (i > maxExactInt || i < -maxExactInt) {
			i = 7
		}
		return i
	case 4:
		x := fuzzFloats[f.intn(len(fuzzFloats))]
		if forOp && x == math.Trunc(x) {
			x = 0.5
		}
		return x
	case 5:
		return f.intn(2) == 1
	case 6:
		return nil
	default:
		return patchFuzzStrings[f.intn(len(patchFuzzStrings))]
	}
}

func escapePointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// path generates a pointer, mostly along existing keys and indexes of doc.
func (f *fuzzBytes) path(doc map[string]any) string {
	switch f.intn(32) {
	case 0:
		return ""
	case 1:
		return "a/b"
	}
	var sb strings.Builder
	var node any = doc
	for range 1 + f.intn(4) {
		sb.WriteByte('/')
		tok := ""
		switch c := node.(type) {
		case map[string]any:
			if len(c) > 0 && f.intn(4) != 0 {
				keys := slices.Sorted(maps.Keys(c))
				key := keys[f.intn(len(keys))]
				tok, node = escapePointerToken(key), c[key]
			}
		case []any:
			if f.intn(4) != 0 {
				i := f.intn(len(c) + 2)
				if i < len(c) {
					node = c[i]
				} else {
					node = nil
				}
				tok = strconv.Itoa(i)
				if i == len(c)+1 {
					tok = "-"
				}
			}
		}
		if tok == "" {
			tok, node = fuzzTokens[f.intn(len(fuzzTokens))], nil
		}
		sb.WriteString(tok)
	}
	return sb.String()
}

// FuzzApplyJSONPatchOps: whenever applyJSONPatchOps answers ok, the
// reference (the apiserver's value encoding, evanphx v4 Apply, the strict
// decoding) succeeded with the same document, or failed a test as it says;
// doc is never modified.
func FuzzApplyJSONPatchOps(f *testing.F) {
	for _, s := range []string{
		"", "\x00\x01\x02\x03", "\x08\x01\x02\x00\x03\x04\x05\x06\x07\x08\x09",
		"\x00\x03\x00\x01\x02\x01\x00\x02\x02\x03\x03\x00\x00\x00\x01\x03\x01\x02",
		strings.Repeat("\x01\x02\x03\x05\x07\x0b", 8),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzApply(t, data) })
}

// fuzzApply is one FuzzApplyJSONPatchOps case; it returns what
// applyJSONPatchOps answered.
func fuzzApply(t testing.TB, data []byte) (ok, failed bool) {
	{
		fb := &fuzzBytes{fuzzSource{b: data}}
		doc := map[string]any{}
		for range fb.intn(5) {
			doc[patchFuzzKeys[fb.intn(len(patchFuzzKeys))]] = fb.value(3, false)
		}
		before, _ := gojson.Marshal(doc)
		ops := make([]jsonPatchOp, 1+fb.intn(4))
		for i := range ops {
			op := &ops[i]
			op.op = fuzzOps[fb.intn(len(fuzzOps))]
			op.path = fb.path(doc)
			if fb.intn(4) != 0 {
				op.from = fb.path(doc)
			}
			if fb.intn(5) != 0 {
				op.hasValue = true
				op.value = fb.value(2, true)
				// The generator must produce what decodeJSONPatchOps would.
				if pv, err := structpb.NewValue(op.value); err == nil {
					if b, err := gojson.Marshal(pv); err == nil {
						var back any
						if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, &back); err != nil || !reflect.DeepEqual(back, op.value) {
							t.Fatalf("generated value %#v is not in decoded form: %s", op.value, b)
						}
					}
				}
			}
		}

		var out map[string]any
		out, failed, ok = applyJSONPatchOps(doc, ops)
		if after, _ := gojson.Marshal(doc); string(after) != string(before) {
			t.Fatalf("doc modified:\n%s\n%s", before, after)
		}
		if !ok {
			return false, false
		}
		p, err := refPatchFromOps(ops)
		if err != nil {
			t.Fatalf("ok, but the apiserver cannot encode the values: %v", err)
		}
		refOut, refFailed, refErr := refApply(doc, p)
		if refErr != nil || failed != refFailed || (!failed && !reflect.DeepEqual(out, refOut)) {
			t.Logf("doc %s", before)
			for _, op := range ops {
				t.Logf("op %+v", op)
			}
		}
		checkAgainstRef(t, out, failed, refOut, refFailed, refErr)
		return ok, failed
	}
}

// benchPod is a Pod as a cluster stores it (defaults applied), in decoded form.
const benchPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7d9f8c6b5-x2x9z","generateName":"web-7d9f8c6b5-","namespace":"default",
"uid":"0c9a3f6e-2b1d-4c8e-9f3a-6d5e4c3b2a10","resourceVersion":"123456","creationTimestamp":"2026-01-02T03:04:05Z",
"labels":{"app":"web","pod-template-hash":"7d9f8c6b5","tier":"frontend"},"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-01-02T03:00:00Z"},
"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8c6b5","uid":"1c9a3f6e-2b1d-4c8e-9f3a-6d5e4c3b2a10","controller":true,"blockOwnerDeletion":true}]},
"spec":{"volumes":[{"name":"kube-api-access-abcde","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},
{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}},{"downwardAPI":{"items":[{"path":"namespace","fieldRef":{"apiVersion":"v1","fieldPath":"metadata.namespace"}}]}}],"defaultMode":420}}],
"initContainers":[{"name":"init","image":"busybox:1.36","command":["sh","-c","echo init"],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],
"containers":[{"name":"app","image":"nginx:1.27","ports":[{"name":"http","containerPort":80,"protocol":"TCP"}],
"env":[{"name":"MODE","value":"prod"},{"name":"POD_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.name"}}}],
"resources":{"limits":{"cpu":"500m","memory":"256Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},
"volumeMounts":[{"name":"kube-api-access-abcde","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],
"livenessProbe":{"httpGet":{"path":"/healthz","port":80,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},
"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],
"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default",
"securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},
{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},
"status":{"phase":"Pending","qosClass":"Burstable"}}`

const benchSidecar = `[JSONPatch{op: "add", path: "/spec/initContainers/-",
  value: Object.spec.initContainers{name: "mesh-proxy", image: "mesh/proxy:v1.0.0", args: ["proxy", "sidecar"], restartPolicy: "Always"}}]`

// BenchmarkFastJSONPatch: the sidecar example's JSONPatch on a Pod, from the
// expression's value to the patched unstructured object; fast is
// decodeJSONPatchOps + applyJSONPatchOps, reference is the apiserver's
// conversion, evanphx v4 Apply on the JSON encoding and the decoding of the
// result. The CEL evaluation (the same for both) is outside.
func BenchmarkFastJSONPatch(b *testing.B) {
	doc := mustDoc(b, benchPod)
	for _, bc := range []struct{ name, expr string }{
		{"sidecar", benchSidecar},
		{"label", `[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/team"), value: "payments"}]`},
	} {
		val := evalJSONPatch(b, bc.expr, doc)
		b.Run(bc.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ops, ok := decodeJSONPatchOps(val)
				if !ok {
					b.Fatal("decode declined")
				}
				if _, failed, ok := applyJSONPatchOps(doc, ops); !ok || failed {
					b.Fatal("apply declined")
				}
			}
		})
		b.Run(bc.name+"/reference", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := refBuildPatch(val)
				if err != nil {
					b.Fatal(err)
				}
				if _, failed, err := refApply(doc, p); err != nil || failed {
					b.Fatal(err)
				}
			}
		})
	}
}

var fuzzCELScalars = []string{
	`1`, `-1`, `0`, `9007199254740991`, `9007199254740993`, `-9007199254740993`, `7u`, `18446744073709551615u`,
	`2.0`, `2.5`, `-0.0`, `0.0`, `1e20`, `1e-7`, `1e300`, `double("NaN")`, `double("-Infinity")`,
	`true`, `null`, `""`, `"s"`, `"<&>"`, `"\u2028"`, `b"\xff\x00"`, `string(b"\xc3\xa9")`,
	`timestamp("2024-01-02T03:04:05.123Z")`, `duration("1m30s")`, `optional.of(1)`, `optional.none()`,
	`object.metadata.name`, `object.spec.containers`, `object.spec.containers[0]`, `object.metadata.labels`,
	`object.metadata.creationTimestamp`, `object.spec.ratio`, `object.spec.replicas`, `object.spec.empty`, `object.spec.none`,
}

var fuzzCELPaths = []string{`"/x"`, `"/spec/replicas"`, `"/metadata/labels/a~1b"`, `"/spec/containers/-"`, `"/spec/containers/0"`,
	`"/metadata/labels/" + jsonpatch.escapeKey("k8s.io/x~y")`, `""`, `"/kind"`, `"/spec/containers/0/args/1"`, `"/metadata/creationTimestamp"`}

// celValue generates a CEL expression for a JSONPatch value; typeName is
// the Object type it would need to be, when inside an Object.
func (f *fuzzBytes) celValue(depth int, typeName string) string {
	k := f.intn(6)
	if depth <= 0 {
		k = 0
	}
	switch k {
	case 1: // list
		var elems []string
		for range f.intn(4) {
			elems = append(elems, "dyn("+f.celValue(depth-1, typeName)+")")
		}
		return "[" + strings.Join(elems, ", ") + "]"
	case 2: // map
		var entries []string
		for range f.intn(3) {
			key := patchFuzzKeys[f.intn(len(patchFuzzKeys))]
			var ks string
			if f.intn(8) == 0 {
				ks = strconv.Itoa(f.intn(3))
			} else {
				ks = strconv.Quote(key)
			}
			entries = append(entries, ks+": dyn("+f.celValue(depth-1, typeName)+")")
		}
		return "{" + strings.Join(entries, ", ") + "}"
	case 3, 4: // Object
		name := typeName
		if name == "" {
			name = "Object.spec.x"
		}
		if f.intn(8) == 0 {
			name += ".wrong"
		}
		var fields []string
		for range f.intn(4) {
			field := []string{"a", "b", "c", "name"}[f.intn(4)]
			fields = append(fields, field+": "+f.celValue(depth-1, name+"."+field))
		}
		return name + "{" + strings.Join(fields, ", ") + "}"
	default:
		return fuzzCELScalars[f.intn(len(fuzzCELScalars))]
	}
}

// FuzzDecodeJSONPatchOps: generated JSONPatch expressions (values of every
// CEL kind, Objects with right and wrong type names); whenever
// decodeJSONPatchOps answers ok, the apiserver's conversion succeeded and
// gives the same operations; and applying them agrees with evanphx v4.
func FuzzDecodeJSONPatchOps(f *testing.F) {
	for _, s := range []string{"", "\x03\x00\x01\x02\x03\x04", "\x01\x03\x02\x01\x05\x04\x03\x02\x01", "\x02\x04\x04\x02\x01\x00\x03\x01\x02\x03"} {
		f.Add([]byte(s))
	}
	doc := mustDoc(f, jpPod)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, doc, data) })
}

// fuzzDecode is one FuzzDecodeJSONPatchOps case; it tells how far it got.
func fuzzDecode(t testing.TB, doc map[string]any, data []byte) (evaluated, decoded, applied bool) {
	{
		fb := &fuzzBytes{fuzzSource{b: data}}
		var ops []string
		for range 1 + fb.intn(3) {
			fields := []string{"op: " + strconv.Quote(fuzzOps[fb.intn(len(fuzzOps))]), "path: " + fuzzCELPaths[fb.intn(len(fuzzCELPaths))]}
			if fb.intn(4) == 0 {
				fields = append(fields, "from: "+fuzzCELPaths[fb.intn(len(fuzzCELPaths))])
			}
			if fb.intn(4) != 0 {
				fields = append(fields, "value: "+fb.celValue(3, ""))
			}
			ops = append(ops, "JSONPatch{"+strings.Join(fields, ", ")+"}")
		}
		expr := "[" + strings.Join(ops, ", ") + "]"
		res := jpCompile(expr)
		if res.Error != nil {
			return false, false, false
		}
		val, _, err := res.Program.Eval(map[string]any{"object": doc})
		if err != nil {
			return false, false, false
		}
		got, ok := decodeJSONPatchOps(val)
		if !ok {
			return true, false, false
		}
		p, err := refBuildPatch(val)
		if err != nil {
			t.Fatalf("%s: decoded, but the apiserver fails: %v", expr, err)
		}
		want, err := refOps(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%s:\n got %#v\nwant %#v", expr, got, want)
		}
		if out, failed, ok := applyJSONPatchOps(doc, got); ok {
			refOut, refFailed, refErr := refApply(doc, p)
			t.Logf("%s", expr)
			checkAgainstRef(t, out, failed, refOut, refFailed, refErr)
			return true, true, true
		}
		return true, true, false
	}
}

// TestJSONPatchDocPrecondition: the unstructured content the engine gives
// CEL for a typed object (ToUnstructured, canonicalObject's content) is in
// the decoded form applyJSONPatchOps requires: equal to the decoding of the
// typed object's JSON encoding, which is what the apiserver's JSON patcher
// patches.
func TestJSONPatchDocPrecondition(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		obj  runtime.Object
	}{
		{"pod", pod, &corev1.Pod{}},
		{"pod with sidecar", podWithSidecar, &corev1.Pod{}},
		{"stored pod", benchPod, &corev1.Pod{}},
		{"deployment", deployment, &appsv1.Deployment{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := gojson.Unmarshal(mustJSON(t, tc.src), tc.obj); err != nil {
				t.Fatal(err)
			}
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			js, err := gojson.Marshal(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if decoded := mustDoc(t, string(js)); !reflect.DeepEqual(content, decoded) {
				t.Fatalf("content %#v\ndecoded %#v", content, decoded)
			}
			// And a patch on it answers as the reference does on the typed encoding.
			ops, ok := decodeJSONPatchOps(evalJSONPatch(t, benchSidecar, content))
			if !ok {
				t.Fatal("decode declined")
			}
			out, failed, ok := applyJSONPatchOps(content, ops)
			p, err := refPatchFromOps(ops)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := p.Apply(js)
			if err != nil {
				if !ok {
					return
				}
				t.Fatalf("ok, reference: %v", err)
			}
			if !ok || failed {
				t.Fatalf("ok=%v testFailed=%v", ok, failed)
			}
			if want := mustDoc(t, string(patched)); !reflect.DeepEqual(out, want) {
				t.Fatalf("got %v\nwant %v", out, want)
			}
		})
	}
}
