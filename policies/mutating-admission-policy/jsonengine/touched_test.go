package jsonengine

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// The apply configuration's fast path (mergeTouched, roundTripTouched) is
// compared with the whole-object path it shortcuts (structured-merge-diff's
// Merge of the whole live object, roundTripObject of the whole result) on
// the test objects and on patches generated from them: the same members
// named again, changed, added, nulled or emptied, at every depth, lists
// replaced, items added to keyed lists, values of the wrong type. Both must
// give the same object (the same JSON) or the same error.

// touchedObjects are the live objects: test/testdata/reviews' objects and
// this package's test objects, each as the engine holds a request's object
// (decoded and round-tripped), with its kind.
func touchedObjects(t testing.TB) []touchedObject {
	t.Helper()
	var out []touchedObject
	add := func(name string, raw []byte) {
		obj, err := decodeObject(raw)
		if err != nil || obj == nil {
			t.Fatalf("%s: %v", name, err)
		}
		g, v, found := strings.Cut(str(obj["apiVersion"]), "/")
		if !found {
			g, v = "", str(obj["apiVersion"])
		}
		k := &attrs{group: g, version: v, kind: str(obj["kind"])}
		canon, err := roundTripObject(obj, k.group, k.version, k.kind, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		decoded, _ := decodeObject(raw)
		out = append(out, touchedObject{name: name, kind: k, live: canon, decoded: decoded})
	}
	files, _ := filepath.Glob("../../../test/testdata/reviews/*.json")
	if len(files) < 4 {
		t.Fatalf("test/testdata/reviews: %d objects", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var review struct {
			Request struct {
				Object json.RawMessage `json:"object"`
			} `json:"request"`
		}
		if err := json.Unmarshal(b, &review); err != nil {
			t.Fatal(err)
		}
		add(filepath.Base(f), review.Request.Object)
	}
	for name, y := range map[string]string{"pod": podYAML, "deployment": deploymentYAML, "widget": widgetYAML,
		"pod-duplicates": strings.Replace(podYAML, "volumes: [{name: data, emptyDir: {}}]",
			"volumes: [{name: data, emptyDir: {}}, {name: data, hostPath: {path: /d}}]\n  hostAliases: [{ip: 10.0.0.1}, {ip: 10.0.0.1, hostnames: [a]}]", 1)} {
		j, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		add(name, j)
	}
	return out
}

type touchedObject struct {
	name    string
	kind    *attrs
	live    map[string]any // decoded and round-tripped
	decoded map[string]any // decoded only
}

// applyBoth runs the apply configuration both ways and fails when they
// differ; it returns the outcome's category ("merged" or the error's start).
func applyBoth(t testing.TB, o touchedObject, patch map[string]any) string {
	t.Helper()
	apiVersion := o.kind.version
	if o.kind.group != "" {
		apiVersion = o.kind.group + "/" + o.kind.version
	}
	outcome := func(fast bool) string {
		p := deepCopyJSON(patch).(map[string]any)
		p["apiVersion"], p["kind"] = apiVersion, o.kind.kind
		before, _ := encodeJSON(o.live)
		var out map[string]any
		var err error
		if fast {
			out, err = applySMD(o.kind, o.live, p, true)
			if err == nil {
				out, err = roundTripTouched(out, p, o.kind.group, o.kind.version, o.kind.kind)
			}
		} else {
			out, err = applySMD(o.kind, o.live, p, false)
			if err == nil {
				out, err = roundTripObject(out, o.kind.group, o.kind.version, o.kind.kind, false)
			}
		}
		if after, _ := encodeJSON(o.live); string(after) != string(before) {
			t.Fatalf("%s: the live object changed (fast %v)", o.name, fast)
		}
		if err != nil && strings.HasPrefix(err.Error(), "failed to convert patch object to typed object") {
			// The patch's validation runs before the two paths part (and
			// stops at the first undeclared field of a map, in the order
			// of a Go map's iteration: a different list from run to run).
			return "error: failed to convert patch object to typed object"
		}
		if err != nil {
			// structured-merge-diff and findAtomics list several errors or
			// paths in the order of a Go map's iteration (so does the
			// apiserver): compared as sets.
			msg := err.Error()
			sep := "\n"
			const atomics = "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: "
			if strings.HasPrefix("error applying patch: "+msg, atomics) {
				msg, sep = strings.TrimPrefix("error applying patch: "+msg, atomics), ", "
			}
			lines := strings.Split(msg, sep)
			sort.Strings(lines)
			return "error: " + strings.Join(lines, "\n")
		}
		b, err := encodeJSON(out)
		if err != nil {
			t.Fatalf("%s: encoding: %v", o.name, err)
		}
		// Encoded the way the library does too: the same types throughout.
		lib, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n" + string(lib)
	}
	slow, fast := outcome(false), outcome(true)
	if slow != fast {
		pj, _ := json.Marshal(patch)
		t.Fatalf("%s, patch %.3000s:\nwhole object: %.3000s\nfast path:    %.3000s", o.name, pj, slow, fast)
	}
	if strings.HasPrefix(slow, "error: ") {
		return slow[:min(len(slow), 50)]
	}
	return "merged"
}

func deepCopyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopyJSON(e)
		}
		return m
	case []any:
		if x == nil {
			return x
		}
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopyJSON(e)
		}
		return l
	}
	return v
}

// genPatch makes an apply configuration from live: it names some of its
// members again (descending into maps), with their values, changed ones,
// nulls, empty maps and lists, new members, and lists replaced or extended
// with one item.
func genPatch(r *rand.Rand, live map[string]any, depth int) map[string]any {
	p := map[string]any{}
	keys := make([]string, 0, len(live))
	for k := range live {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if r.Intn(3) != 0 {
			continue
		}
		p[k] = genValue(r, live[k], depth)
	}
	if r.Intn(40) == 0 {
		p[fmt.Sprintf("new%d", r.Intn(3))] = genValue(r, nil, depth)
	}
	for _, k := range []string{"labels", "annotations", "finalizers", "replicas", "image", "name"} {
		if _, ok := live[k]; !ok && r.Intn(40) == 0 {
			p[k] = genValue(r, nil, depth)
		}
	}
	return p
}

func genValue(r *rand.Rand, v any, depth int) any {
	switch r.Intn(40) {
	case 0:
		return nil
	case 1:
		return map[string]any{}
	case 2:
		return []any{}
	case 3:
		return "x"
	case 4:
		return int64(r.Intn(3))
	case 5:
		return map[string]any{"team": "payments"}
	}
	switch x := v.(type) {
	case map[string]any:
		if depth < 6 {
			return genPatch(r, x, depth+1)
		}
		return deepCopyJSON(x)
	case []any:
		l := deepCopyJSON(x).([]any)
		if len(l) > 0 && r.Intn(2) == 0 {
			item := deepCopyJSON(l[r.Intn(len(l))])
			if m, ok := item.(map[string]any); ok && depth < 6 {
				item = genPatch(r, m, depth+1)
				if n, ok := m["name"]; ok && r.Intn(2) == 0 {
					item.(map[string]any)["name"] = n
				}
			}
			if r.Intn(2) == 0 {
				return []any{item}
			}
			return append(l, item)
		}
		return l
	case string:
		if r.Intn(2) == 0 {
			return x
		}
		return x + "-2"
	case int64:
		return x + int64(r.Intn(2))
	case bool:
		return !x
	}
	return v
}

// TestMergeTouched: the fast path and the whole-object path give the same
// objects and errors on every test object with generated patches (and the
// patches hit both outcomes).
func TestMergeTouched(t *testing.T) {
	objects := touchedObjects(t)
	r := rand.New(rand.NewSource(31))
	counts := map[string]int{}
	for _, o := range objects {
		for _, p := range []map[string]any{
			{"metadata": map[string]any{"labels": map[string]any{"team": "payments"}}},
			{"metadata": map[string]any{"labels": map[string]any{}}},
			{"metadata": map[string]any{"labels": nil}},
			{"metadata": nil},
			{"metadata": map[string]any{}},
			{"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "x"}}}},
			{"spec": map[string]any{"volumes": []any{map[string]any{"name": "data", "emptyDir": map[string]any{"medium": "Memory"}}}}},
			{"spec": map[string]any{"hostAliases": []any{map[string]any{"ip": "10.0.0.1", "hostnames": []any{"b"}}}}},
			{"status": map[string]any{"phase": 3}},
			{},
		} {
			counts[applyBoth(t, o, p)]++
		}
		for i := 0; i < 300; i++ {
			counts[applyBoth(t, o, genPatch(r, o.live, 0))]++
		}
	}
	t.Logf("outcomes: %v", counts)
	if counts["merged"] < 1000 || len(counts) < 4 {
		t.Fatalf("the patches do not test both outcomes: %v", counts)
	}
}

// FuzzMergeTouched is TestMergeTouched with the seed of the generated
// patches fuzzed (go test -fuzz FuzzMergeTouched -fuzztime 10s).
func FuzzMergeTouched(f *testing.F) {
	objects := touchedObjects(f)
	f.Add(int64(1), uint8(0))
	f.Add(int64(31), uint8(3))
	f.Fuzz(func(t *testing.T, seed int64, which uint8) {
		o := objects[int(which)%len(objects)]
		applyBoth(t, o, genPatch(rand.New(rand.NewSource(seed)), o.live, 0))
	})
}

// TestRoundTripTouchedIdempotent: roundTripTouched takes the members its
// patch does not reach as they are, which holds because a round trip of a
// round trip's output gives it back: checked on every test object.
func TestRoundTripTouchedIdempotent(t *testing.T) {
	for _, o := range touchedObjects(t) {
		again, err := roundTripObject(o.live, o.kind.group, o.kind.version, o.kind.kind, false)
		if err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
		if !reflect.DeepEqual(again, o.live) {
			t.Fatalf("%s: a second round trip changes the object", o.name)
		}
	}
}

// TestFastPathsAgainstSlow: whole evaluations with the fast paths and
// without them (slowPaths) give the same results, bytes and messages alike:
// every case of this package's tests, and every test object under apply
// configurations that add, keep, replace and merge members (one that
// changes nothing among them), alone and followed by a JSON patch.
func TestFastPathsAgainstSlow(t *testing.T) {
	ctx := context.Background()
	evaluate := func(t *testing.T, e *Engine, req *protocol.KubernetesAdmissionRequest, slow bool) string {
		slowPaths = slow
		defer func() { slowPaths = false }()
		res, err := e.Evaluate(ctx, req)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("%v %d %q\n%s", res.Accepted, res.Code, res.Message, res.Object)
	}
	compare := func(t *testing.T, e *Engine, req *protocol.KubernetesAdmissionRequest) string {
		slow, fast := evaluate(t, e, req, true), evaluate(t, e, req, false)
		if slow != fast {
			t.Fatalf("slow paths: %.2000s\nfast paths: %.2000s", slow, fast)
		}
		return slow
	}
	for _, c := range append(testCases, authzCases...) {
		settings, err := yaml.YAMLToJSON([]byte(c.settings))
		if err != nil {
			t.Fatal(err)
		}
		e, err := Compile(settings)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, r := range c.requests {
			compare(t, e, admissionRequest(t, r))
		}
	}
	policies := []string{
		ac(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`),
		ac(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`) + ac(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`),
		ac(`Object{metadata: Object.metadata{annotations: {"a": "b"}, finalizers: ["x"]}}`),
		ac(`Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", image: "nginx:2"}]}}`),
		ac(`Object{spec: Object.spec{containers: [Object.spec.containers{name: "checkout", image: "nginx:2", ports: [Object.spec.containers.ports{containerPort: 9090}]}]}}`),
		ac(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`) + jp(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"x": "y"}}]`),
		ac(`Object{metadata: Object.metadata{labels: object.metadata.?labels.orValue({})}}`),
		ac(`Object{spec: Object.spec{priority: 3}}`),
	}
	counts := map[string]int{}
	for _, o := range touchedObjects(t) {
		raw, err := encodeJSON(o.live)
		if err != nil {
			t.Fatal(err)
		}
		resource := strings.ToLower(o.kind.kind) + "s"
		if o.kind.kind == "Ingress" {
			resource = "ingresses"
		}
		req := &protocol.KubernetesAdmissionRequest{
			UID: "1", Operation: "CREATE", Namespace: "default",
			Kind:     protocol.GroupVersionKind{Group: o.kind.group, Version: o.kind.version, Kind: o.kind.kind},
			Resource: protocol.GroupVersionResource{Group: o.kind.group, Version: o.kind.version, Resource: resource},
			UserInfo: protocol.UserInfo{Username: "alice"},
			Object:   raw,
		}
		for _, p := range policies {
			y := strings.Replace(policyYAML("", p), "resources: [pods, deployments, widgets]", "resources: ['*']", 1)
			y = strings.Replace(y, `apiGroups: ["", apps, example.com]`, `apiGroups: ["*"]`, 1)
			settings, err := yaml.YAMLToJSON([]byte(y))
			if err != nil {
				t.Fatal(err)
			}
			e, err := Compile(settings)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			out := compare(t, e, req)
			switch {
			case strings.HasPrefix(out, "true 0 \"\"\n") && len(out) > len("true 0 \"\"\n"):
				counts["mutated"]++
			case strings.HasPrefix(out, "true"):
				counts["unchanged"]++
			default:
				counts["rejected or error"]++
			}
		}
	}
	t.Logf("%v", counts)
	if counts["mutated"] < 40 || counts["unchanged"] < 5 || counts["rejected or error"] < 5 {
		t.Fatalf("the cases do not test every outcome: %v", counts)
	}
}

// TestValidatesAgainstSMD: validates never says true where
// structured-merge-diff's validation of a live object fails, and says true
// for every test object: the objects, changed versions of them (odd values,
// removed and added members) and hand-made invalid ones.
func TestValidatesAgainstSMD(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	counts := map[string]int{}
	check := func(o touchedObject, v map[string]any) bool {
		parse, err := parseableType(o.kind, v)
		if err != nil {
			t.Fatal(err)
		}
		fast := validates(parse.Schema, parse.TypeRef, v, 0)
		_, err = parse.FromUnstructured(v, typed.AllowDuplicates)
		if fast && err != nil {
			b, _ := json.Marshal(v)
			t.Fatalf("%s: validates says true, structured-merge-diff: %v\n%.2000s", o.name, err, b)
		}
		counts[fmt.Sprintf("validates=%v smd-ok=%v", fast, err == nil)]++
		return fast
	}
	set := func(v any, value any, path ...string) map[string]any {
		c := deepCopyJSON(v).(map[string]any)
		m := c
		for _, p := range path[:len(path)-1] {
			switch x := m[p].(type) {
			case map[string]any:
				m = x
			case []any:
				m = x[0].(map[string]any)
			}
		}
		if value == "delete" {
			delete(m, path[len(path)-1])
		} else {
			m[path[len(path)-1]] = value
		}
		return c
	}
	for _, o := range touchedObjects(t) {
		if !check(o, o.live) {
			t.Fatalf("%s: validates says false on a test object", o.name)
		}
		for i := 0; i < 200; i++ {
			if m, ok := mutateShared(r, o.live, 0).(map[string]any); ok && m != nil {
				check(o, m)
			}
		}
		if o.kind.kind != "Pod" {
			continue
		}
		for _, v := range []map[string]any{
			set(o.live, "delete", "spec", "containers", "name"),
			set(o.live, nil, "spec", "containers", "name"),
			set(o.live, []any{nil}, "spec", "containers"),
			set(o.live, []any{"x"}, "spec", "containers"),
			set(o.live, []any{map[string]any{}}, "spec", "containers"),
			set(o.live, []any{map[string]any{"name": "a", "ports": []any{map[string]any{"name": "p"}}}}, "spec", "containers"),
			set(o.live, []any{map[string]any{}}, "metadata", "finalizers"),
			set(o.live, []any{[]any{}}, "metadata", "finalizers"),
			set(o.live, []any{nil}, "metadata", "finalizers"),
			set(o.live, []any{"a", "a"}, "metadata", "finalizers"),
			set(o.live, int64(1), "metadata", "name"),
			set(o.live, true, "spec", "priority"),
			set(o.live, 1.5, "spec", "priority"),
			set(o.live, "x", "spec"),
			set(o.live, []any{}, "spec"),
			set(o.live, int64(1), "undeclared"),
			set(o.live, map[string]any{"a": int64(1)}, "metadata", "labels"),
			set(o.live, int(1), "spec", "priority"),
		} {
			check(o, v)
		}
	}
	t.Logf("%v", counts)
	if counts["validates=true smd-ok=true"] < 1000 || counts["validates=false smd-ok=false"] < 100 || counts["validates=false smd-ok=true"] > counts["validates=true smd-ok=true"]/20 {
		t.Fatalf("the objects do not test every outcome, or validates declines too often: %v", counts)
	}
}

// TestRoundTripMembers: roundTripMembers gives roundTrip's result (unknown
// fields deleted), and fails where roundTrip fails, on the test objects as
// decoded, changed versions of them (odd values, unknown and removed
// members, nil maps and lists) and their round-tripped forms; whole
// evaluations with its errors: TestFastPathsAgainstSlow.
func TestRoundTripMembers(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	counts := map[string]int{}
	for _, o := range touchedObjects(t) {
		ti, ok := typedKind(o.kind.group, o.kind.version, o.kind.kind)
		if !ok {
			continue
		}
		objects := []map[string]any{o.decoded, o.live}
		if md, ok := o.decoded["metadata"].(map[string]any); ok {
			// nil lists and maps (decoded JSON has none, changed content may)
			for i, v := range []any{[]any(nil), map[string]any(nil), []any{}, map[string]any{}, []any{nil}} {
				m := deepCopyJSON(o.decoded).(map[string]any)
				md2 := deepCopyJSON(md).(map[string]any)
				m["metadata"] = md2
				md2["unknownField"] = v
				if i%2 == 0 { // lists
					md2["finalizers"], md2["ownerReferences"] = v, v
					if spec, ok := m["spec"].(map[string]any); ok {
						spec["containers"] = v // not omitempty in a PodSpec
					}
				} else {
					md2["labels"], md2["annotations"] = v, v
				}
				objects = append(objects, m)
			}
		}
		for i := 0; i < 300; i++ {
			if m, ok := mutateShared(r, o.decoded, 0).(map[string]any); ok && m != nil {
				objects = append(objects, m)
			}
		}
		for _, obj := range objects {
			run := func(inPlace bool) string {
				v := deepCopyJSON(obj)
				before, _ := json.Marshal(obj)
				var unknown []string
				var out any
				var err error
				if inPlace {
					var ok bool
					if out, ok = roundTripMembers(v, ti); !ok {
						return "error"
					}
				} else {
					out, err = roundTrip(v, ti, make(lazyPath, 0, 32), errContext{field: make(lazyPath, 0, 32)}, &unknown)
				}
				if after, _ := json.Marshal(obj); string(after) != string(before) {
					t.Fatal("the object was changed, not its copy")
				}
				if err != nil {
					return "error" // roundTripRequestObject then redoes it by roundTrip
				}
				b, err := json.Marshal(out)
				if err != nil {
					t.Fatal(err)
				}
				e, _ := encodeJSON(out.(map[string]any))
				return fmt.Sprintf("%s\n%s\n%v", b, e, len(unknown) > 0) // roundTripMembers reports none
			}
			want, got := run(false), run(true)
			want = strings.Replace(want, "\ntrue", "\nfalse", 1)
			if want != got {
				b, _ := json.Marshal(obj)
				t.Fatalf("%s: %.1500s\nroundTrip:        %.1500s\nroundTripMembers: %.1500s", o.name, b, want, got)
			}
			switch {
			case want == "error":
				counts["error"]++
			case strings.HasSuffix(run(false), "false"):
				counts["converted"]++
			default:
				counts["with unknown fields"]++
			}
		}
	}
	t.Logf("%v", counts)
	if counts["error"] < 50 || counts["converted"] < 200 || counts["with unknown fields"] < 100 {
		t.Fatalf("the objects do not test every outcome: %v", counts)
	}
}

// TestTableStringsCopied: no string the decoded tables keep (the
// structured-merge schema's, the typed table's: every string reachable from
// them) points into the decoded document's bytes.
func TestTableStringsCopied(t *testing.T) {
	for _, tc := range []struct {
		doc    []byte
		floats bool
		decode func(any) (any, error)
	}{
		{smdSchemaJSON, true, func(d any) (any, error) { return decodeSMDSchemaDoc(d) }},
		{typedKindsJSON, false, func(d any) (any, error) { return decodeTypedTableDoc(d) }},
	} {
		v, ok := decodeFastValue(tc.doc, tc.floats)
		if !ok {
			t.Fatal("not decoded")
		}
		var lo, hi uintptr
		var n int
		walkStrings(v, func(s string) {
			if len(s) == 0 {
				return
			}
			p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			if lo == 0 || p < lo {
				lo = p
			}
			if p+uintptr(len(s)) > hi {
				hi = p + uintptr(len(s))
			}
			n++
		})
		if n < 1000 || hi-lo < uintptr(len(tc.doc))/2 {
			t.Fatalf("%d strings over %d bytes: not substrings of one document (the test tests nothing)", n, hi-lo)
		}
		tables, err := tc.decode(v)
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		walkReflect(reflect.ValueOf(tables), map[uintptr]bool{}, func(s string) {
			kept++
			if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); len(s) > 0 && p >= lo && p < hi {
				t.Fatalf("%q points into the document", s)
			}
		})
		if kept < 1000 {
			t.Fatalf("only %d strings found in the tables", kept)
		}
	}
}

// walkReflect calls fn with every string reachable from v.
func walkReflect(v reflect.Value, seen map[uintptr]bool, fn func(string)) {
	switch v.Kind() {
	case reflect.String:
		fn(v.String())
	case reflect.Pointer:
		if v.IsNil() || seen[v.Pointer()] {
			return
		}
		seen[v.Pointer()] = true
		walkReflect(v.Elem(), seen, fn)
	case reflect.Interface:
		if !v.IsNil() {
			walkReflect(v.Elem(), seen, fn)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			walkReflect(v.Field(i), seen, fn)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			walkReflect(v.Index(i), seen, fn)
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			walkReflect(it.Key(), seen, fn)
			walkReflect(it.Value(), seen, fn)
		}
	}
}

func walkStrings(v any, fn func(string)) {
	switch x := v.(type) {
	case string:
		fn(x)
	case map[string]any:
		for k, e := range x {
			fn(k)
			walkStrings(e, fn)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, fn)
		}
	}
}
