package engine

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestSpliceTyped checks spliceTyped against the conversion it replaces
// (the whole new content encoded and decoded into a new typed object), on
// randomly filled objects of every kind it accepts, with random changes of
// their content: a member replaced by another object's, removed, a string
// changed, nothing changed. Whenever it does not decline, the result must
// encode to the same bytes, hold nil and empty maps and slices in the same
// places (defaulting tells them apart; the filler makes empty non-nil ones,
// which the encoding drops), and encode the same after defaulting. Both
// decodings (strict, for the JSON patcher, and not) are checked.
func TestSpliceTyped(t *testing.T) {
	e := compile(t, sidecarJSONPatch)
	filler := newObjectFiller()
	rng := rand.New(rand.NewSource(1))
	spliced, declined := 0, 0
	for gvk, typ := range objectScheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || !jsonRoundTripExact(reflect.PointerTo(typ)) {
			continue
		}
		for i := 0; i < 6; i++ {
			old := reflect.New(typ).Interface().(runtime.Object)
			filler.Fill(old)
			donor := reflect.New(typ).Interface().(runtime.Object)
			filler.Fill(donor)
			oldC := contentOf(t, old)
			newC := changeContent(rng, oldC, contentOf(t, donor))
			for _, strict := range []bool{false, true} {
				got, ok := spliceTyped(old, oldC, newC, strict)
				if !ok {
					declined++
					continue
				}
				spliced++
				b, ok := encodeUnstructured(newC)
				if !ok {
					t.Fatalf("%v: encodeUnstructured declined", gvk)
				}
				want := reflect.New(typ).Interface().(runtime.Object)
				if err := decodeJSON(b, want, strict); err != nil {
					t.Fatalf("%v: spliced content the decoder refuses: %v\n%s", gvk, err, b)
				}
				compareTyped(t, e, gvk, got, want, b)
			}
		}
	}
	t.Logf("%d spliced, %d declined", spliced, declined)
	if spliced < 10*declined {
		t.Errorf("declined too often: %d spliced, %d declined", spliced, declined)
	}
}

// TestSpliceTypedNormalizes pins the one difference between a typed object
// and the decoding of its encoding that defaulting can see: an empty
// non-nil list of an omitempty field. A Pod with `ports: []` keeps it when
// decoded; its encoding leaves ports out, so the apiserver's conversion of a
// mutation's result gives nil.
func TestSpliceTypedNormalizes(t *testing.T) {
	old := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{}}}}}
	old.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Pod"})
	oldC := contentOf(t, old)
	newC := map[string]any{}
	for k, v := range oldC {
		newC[k] = v
	}
	newC["metadata"] = map[string]any{"labels": map[string]any{"team": "payments"}}
	got, ok := spliceTyped(old, oldC, newC, false)
	if !ok {
		t.Fatal("declined")
	}
	pod := got.(*corev1.Pod)
	if pod.Spec.Containers[0].Ports != nil {
		t.Errorf("ports: got %#v, want nil (what decoding the content gives)", pod.Spec.Containers[0].Ports)
	}
	if pod.Labels["team"] != "payments" {
		t.Errorf("labels: %v", pod.Labels)
	}
	if old.Spec.Containers[0].Ports == nil || old.Labels != nil {
		t.Error("the object spliced from was modified")
	}
}

func contentOf(t *testing.T, obj runtime.Object) map[string]any {
	t.Helper()
	w := &canonicalObject{typed: obj, state: &fastState{}}
	c := w.UnstructuredContent()
	if w.state.failed {
		t.Fatalf("%T: no content", obj)
	}
	return c
}

// compareTyped fails unless got and want encode alike, hold nil maps and
// slices in the same places, and encode alike after defaulting.
func compareTyped(t *testing.T, e *Engine, gvk schema.GroupVersionKind, got, want runtime.Object, content []byte) {
	t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("%v: encodings differ\n  spliced %s\n  decoded %s", gvk, gb, wb)
	}
	if path := nilDifference(reflect.ValueOf(got), reflect.ValueOf(want), ""); path != "" {
		t.Fatalf("%v: nil and empty differ at %s (content %s)", gvk, path, content)
	}
	e.objects.GetObjectDefaulter().Default(got)
	e.objects.GetObjectDefaulter().Default(want)
	gb, _ = json.Marshal(got)
	wb, _ = json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("%v: encodings differ after defaulting\n  spliced %s\n  decoded %s", gvk, gb, wb)
	}
}

// nilDifference is the first place where a and b differ in the nil-ness or
// length of a pointer, map or slice, or "".
func nilDifference(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() != b.IsNil() {
			return path
		}
		if !a.IsNil() {
			return nilDifference(a.Elem(), b.Elem(), path)
		}
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return path
		}
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() {
				return fmt.Sprintf("%s[%v]", path, it.Key())
			}
			if p := nilDifference(it.Value(), bv, fmt.Sprintf("%s[%v]", path, it.Key())); p != "" {
				return p
			}
		}
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return path
		}
		fallthrough
	case reflect.Array:
		for i := 0; i < a.Len(); i++ {
			if p := nilDifference(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if p := nilDifference(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

// changeContent returns c with one random change, copying only the maps
// and lists along the changed path (the rest is shared, as fastApply and
// applyJSONPatchOps leave it), or c itself one time in eight.
func changeContent(rng *rand.Rand, c, donor map[string]any) map[string]any {
	if rng.Intn(8) == 0 {
		return c
	}
	out, _ := changeMap(rng, c, donor).(map[string]any)
	return out
}

func changeMap(rng *rand.Rand, c map[string]any, donor any) any {
	out := make(map[string]any, len(c))
	for k, v := range c {
		out[k] = v
	}
	d, _ := donor.(map[string]any)
	keys := make([]string, 0, len(c)+len(d))
	for k := range c {
		keys = append(keys, k)
	}
	for k := range d {
		if _, ok := c[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return out
	}
	sort.Strings(keys)
	k := keys[rng.Intn(len(keys))]
	v, inC := c[k]
	dv, inD := d[k]
	switch {
	case inC && rng.Intn(3) > 0:
		switch x := v.(type) {
		case map[string]any:
			out[k] = changeMap(rng, x, dv)
			return out
		case []any:
			if len(x) > 0 {
				l := append([]any(nil), x...)
				i := rng.Intn(len(l))
				var de any
				if dl, ok := dv.([]any); ok && i < len(dl) {
					de = dl[i]
				}
				if m, ok := l[i].(map[string]any); ok {
					l[i] = changeMap(rng, m, de)
				} else if de != nil {
					l[i] = de
				}
				out[k] = l
				return out
			}
		case string:
			out[k] = x + "-changed"
			return out
		}
		fallthrough
	case inD:
		out[k] = dv
	default:
		delete(out, k)
	}
	return out
}
