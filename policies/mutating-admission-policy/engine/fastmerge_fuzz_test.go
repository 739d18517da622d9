package engine

import (
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
)

// FuzzFastApply checks fastApply's invariant on generated live objects and
// patches: whenever it vouches for a result, ApplyStructuredMergeDiff
// succeeds with deep-equal content (and neither input is modified).
//
// The generator follows the schema of a Pod, a Deployment or a schemaless
// kind, choosing field names mostly from a small vocabulary of fields that
// apply configurations set (plus unknown names), list keys from a few values
// (so that patch items meet live items and duplicates), and now and then a
// value of the wrong type, a null or a non-JSON Go value.
func FuzzFastApply(f *testing.F) {
	for _, seed := range []string{
		"",
		"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f",
		"\x01\x03\x05\x07\x09\x0b\x0d\x0f\x11\x13\x15\x17\x19\x1b\x1d\x1f\x21\x23",
		"\x02\xff\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xb0\xc0\xd0\xe0\xf0",
		"\x00\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02",
		"\x01\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07\x07",
	} {
		f.Add([]byte(seed))
	}
	tcs := newTypeConverters(objectScheme)
	f.Fuzz(func(t *testing.T, data []byte) {
		live, p := fuzzInput(tcs, data)
		checkFastApply(t, live, p)
	})
}

// fuzzInput builds a live object and a patch of one kind from data.
func fuzzInput(tcs *typeConverters, data []byte) (live, p map[string]any) {
	kinds := [][2]string{{"v1", "Pod"}, {"apps/v1", "Deployment"}, {"example.com/v1", "Widget"}}
	g := &fuzzGen{fuzzSource: fuzzSource{b: data}}
	k := kinds[g.intn(len(kinds))]
	s, root, ok := tcs.mergeSchema(schema.FromAPIVersionAndKind(k[0], k[1]))
	if !ok {
		panic("no merge schema for " + k[1])
	}
	g.s = s
	g.budget = 60
	live, _ = g.value(root, 0, false).(map[string]any)
	if live == nil {
		live = map[string]any{}
	}
	g.budget = 25
	p, _ = g.value(root, 0, true).(map[string]any)
	if p == nil {
		p = map[string]any{}
	}
	live["apiVersion"], live["kind"] = k[0], k[1]
	p["apiVersion"], p["kind"] = k[0], k[1]
	if g.intn(32) == 0 {
		p["kind"] = "Other"
	}
	return live, p
}

type fuzzGen struct {
	fuzzSource
	s      *smdschema.Schema
	budget int // values left to generate
}

// rare is true now and then: for an odd value or an unknown field. Patches
// get fewer (each patch value is checked by SMD, one is enough to reject it).
func (g *fuzzGen) rare(patch bool) bool {
	if patch {
		return g.byte() < 3
	}
	return g.byte() < 5
}

// fuzzFields are the field names preferred where a type declares them.
var fuzzFields = map[string]bool{
	"metadata": true, "labels": true, "annotations": true, "finalizers": true, "name": true,
	"creationTimestamp": true, "ownerReferences": true, "uid": true, "spec": true, "containers": true,
	"initContainers": true, "image": true, "ports": true, "containerPort": true, "protocol": true,
	"hostPort": true, "env": true, "value": true, "volumes": true, "emptyDir": true, "sizeLimit": true,
	"replicas": true, "template": true, "selector": true, "matchLabels": true, "args": true,
	"tolerations": true, "key": true, "nodeSelector": true, "hostname": true, "hostNetwork": true,
	"terminationGracePeriodSeconds": true, "resources": true, "limits": true, "requests": true,
	"readinessProbe": true, "httpGet": true, "port": true, "strategy": true, "rollingUpdate": true,
	"maxSurge": true, "restartPolicy": true, "topologySpreadConstraints": true, "topologyKey": true,
	"whenUnsatisfiable": true, "maxSkew": true, "imagePullSecrets": true, "securityContext": true,
	"runAsUser": true, "privileged": true, "volumeMounts": true, "mountPath": true, "minReadySeconds": true,
}

var (
	fuzzStrings = []string{"a", "b", "app", "TCP", "UDP", "", "x"}
	fuzzKeys    = []string{"a", "b", "app"}
)

// odd is a value of no particular type: a wrong kind, a null, a non-JSON
// Go value.
func (g *fuzzGen) odd(depth int) any {
	switch g.intn(10) {
	case 0:
		return nil
	case 1:
		return "s"
	case 2:
		return int64(7)
	case 3:
		return 2.5
	case 4:
		return true
	case 5:
		return map[string]any{fuzzKeys[g.intn(len(fuzzKeys))]: "v"}
	case 6:
		return []any{"v"}
	case 7:
		return int(3) // a Go int: valid for SMD, not what JSON decodes to
	case 8:
		return uint64(3) // not a value SMD accepts
	default:
		return map[string]string{"a": "b"}
	}
}

func (g *fuzzGen) scalar(t smdschema.Scalar) any {
	switch t {
	case smdschema.String:
		return fuzzStrings[g.intn(len(fuzzStrings))]
	case smdschema.Numeric:
		return [...]any{int64(0), int64(1), int64(80), int64(443), 1.5, float64(80)}[g.intn(6)]
	case smdschema.Boolean:
		return g.intn(2) == 0
	}
	return [...]any{"a", int64(80), "80%", true, 1.5}[g.intn(5)]
}

// value generates a value of type tr. Patches use fewer fields per map.
func (g *fuzzGen) value(tr smdschema.TypeRef, depth int, patch bool) any {
	g.budget--
	if g.rare(patch) {
		return g.odd(depth)
	}
	a, ok := g.s.Resolve(tr)
	if !ok {
		return nil
	}
	if depth > 7 || g.budget <= 0 {
		if a.Scalar != nil {
			return g.scalar(*a.Scalar)
		}
		if a.Map != nil && g.intn(2) == 0 {
			return map[string]any{}
		}
		return nil
	}
	// Multi-kind (untyped) types: pick one.
	pick := []int{}
	if a.Map != nil {
		pick = append(pick, kindMap, kindMap)
	}
	if a.List != nil {
		pick = append(pick, kindList)
	}
	if a.Scalar != nil {
		pick = append(pick, kindScalar, kindScalar)
	}
	if len(pick) == 0 {
		return nil
	}
	switch pick[g.intn(len(pick))] {
	case kindScalar:
		return g.scalar(*a.Scalar)
	case kindList:
		return g.list(a.List, depth, patch)
	default:
		return g.mapValue(a.Map, depth, patch)
	}
}

func (g *fuzzGen) mapValue(m *smdschema.Map, depth int, patch bool) map[string]any {
	out := map[string]any{}
	n := g.intn(5)
	if patch {
		n = g.intn(3)
	}
	var preferred []smdschema.StructField
	for _, f := range m.Fields {
		if fuzzFields[f.Name] {
			preferred = append(preferred, f)
		}
	}
	for range n {
		var name string
		var tr smdschema.TypeRef
		switch r := 2 + g.intn(14); {
		case g.rare(patch) || (len(m.Fields) == 0 && m.ElementType == (smdschema.TypeRef{})):
			name, tr = "bogus", smdschema.TypeRef{}
		case len(m.Fields) == 0 || (r == 1 && m.ElementType != (smdschema.TypeRef{})):
			name, tr = fuzzKeys[g.intn(len(fuzzKeys))], m.ElementType
		case r < 4 || len(preferred) == 0:
			f := m.Fields[g.intn(len(m.Fields))]
			name, tr = f.Name, f.Type
		default:
			f := preferred[g.intn(len(preferred))]
			name, tr = f.Name, f.Type
		}
		if tr == (smdschema.TypeRef{}) {
			out[name] = g.odd(depth)
			continue
		}
		out[name] = g.value(tr, depth+1, patch)
	}
	return out
}

func (g *fuzzGen) list(l *smdschema.List, depth int, patch bool) []any {
	n := g.intn(4)
	out := make([]any, 0, n)
	// Key values: in a patch mostly distinct (duplicates are an error
	// there), in the live object anything.
	base, distinct := g.intn(3), patch && g.intn(8) != 0
	keyIndex := func(i int) int {
		if distinct {
			return (base + i) % 3
		}
		return g.intn(3)
	}
	for i := range n {
		if l.ElementRelationship == smdschema.Associative && len(l.Keys) == 0 {
			// A set: few values, so that they repeat.
			if g.rare(patch) {
				out = append(out, g.odd(depth))
			} else {
				out = append(out, fuzzKeys[keyIndex(i)])
			}
			continue
		}
		v := g.value(l.ElementType, depth+1, patch)
		if m, ok := v.(map[string]any); ok && len(l.Keys) > 0 {
			// Key fields from a few values, sometimes left out.
			ki := keyIndex(i)
			for _, k := range l.Keys {
				switch g.intn(8) {
				case 0:
					delete(m, k)
				case 1:
					// keep what was generated
				default:
					if a, ok := g.s.Resolve(l.ElementType); ok && a.Map != nil {
						if f, ok := a.Map.FindField(k); ok {
							if fa, ok := g.s.Resolve(f.Type); ok && fa.Scalar != nil && *fa.Scalar == smdschema.Numeric {
								m[k] = [...]int64{80, 443, 8080}[ki]
								continue
							}
						}
					}
					m[k] = fuzzKeys[ki]
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// TestFuzzFastApplyGenerator runs the fuzz body on pseudo-random inputs (so
// that plain `go test` checks the invariant on many inputs) and checks that
// the generator reaches the fast path often enough to be worth fuzzing.
func TestFuzzFastApplyGenerator(t *testing.T) {
	tcs := newTypeConverters(objectScheme)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	var vouched, smdOK, listMerges int
	for range n {
		data := make([]byte, 64+rng.IntN(192))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		live, p := fuzzInput(tcs, data)
		ok, _, err := checkFastApply(t, live, p)
		if ok {
			vouched++
			if hasList(p) {
				listMerges++
			}
		}
		if err == nil {
			smdOK++
		}
	}
	t.Logf("%d inputs: SMD accepted %d, fastApply vouched for %d (%d with lists in the patch)", n, smdOK, vouched, listMerges)
	if vouched < n/10 || listMerges < n/100 {
		t.Errorf("the generator reaches the fast path too rarely")
	}
}

func hasList(v any) bool {
	switch x := v.(type) {
	case []any:
		return len(x) > 0
	case map[string]any:
		for _, c := range x {
			if hasList(c) {
				return true
			}
		}
	}
	return false
}
