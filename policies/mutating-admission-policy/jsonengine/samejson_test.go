package jsonengine

import (
	"bytes"
	"math"
	"math/rand"
	"sort"
	"testing"
)

// checkSameJSON fails when sameJSON claims something the encodings deny:
// when ok, same must be the encodings' equality and a must encode.
func checkSameJSON(t testing.TB, a, b map[string]any) (same, ok bool) {
	t.Helper()
	eb, err := encodeJSON(b)
	if err != nil {
		return false, false // sameJSON is not asked then
	}
	same, ok = sameJSON(a, b)
	if !ok {
		return false, false
	}
	ea, err := encodeJSON(a)
	if err != nil {
		t.Fatalf("sameJSON answered (same %v) for an object that does not encode: %v", same, err)
	}
	if want := bytes.Equal(ea, eb); same != want {
		t.Fatalf("sameJSON says same=%v, the encodings say %v:\n%.1500s\n%.1500s", same, want, ea, eb)
	}
	return same, ok
}

// oddValues are values where comparing the encodings is not comparing the
// values: numbers of two Go types, non-finite floats, negative zero,
// strings that are not valid UTF-8, nil maps and lists.
var oddValues = []any{
	int64(1), float64(1), 1.5, math.Inf(1), math.NaN(), math.Copysign(0, -1), float64(0), int64(0),
	"\xff", "\xfe", "\ufffd", "a", "", nil, map[string]any(nil), []any(nil), map[string]any{}, []any{},
	true, false, map[string]any{"\xff": int64(1)}, map[string]any{"\ufffd": int64(1)}, []any{int64(1)},
	[]any{float64(1)}, int(1),
}

// mutateShared returns v changed here and there, sharing what it leaves
// alone (as an apply configuration's result shares its object's members).
func mutateShared(r *rand.Rand, v any, depth int) any {
	if r.Intn(4) == 0 || depth > 8 {
		return v
	}
	if r.Intn(10) == 0 {
		return oddValues[r.Intn(len(oddValues))]
	}
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		keys := make([]string, 0, len(x))
		for k, e := range x {
			out[k] = e
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch r.Intn(8) {
			case 0:
				out[k] = mutateShared(r, x[k], depth+1)
			case 1:
				delete(out, k)
			case 2:
				out[k] = deepCopyJSON(x[k])
			}
		}
		if r.Intn(6) == 0 {
			out[[]string{"new", "\xff", "\ufffd"}[r.Intn(3)]] = oddValues[r.Intn(len(oddValues))]
		}
		return out
	case []any:
		if r.Intn(3) == 0 {
			return append(x[:len(x):len(x)], oddValues[r.Intn(len(oddValues))])
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
			if r.Intn(4) == 0 {
				out[i] = mutateShared(r, e, depth+1)
			}
		}
		return out
	case string:
		return x + "!"
	case int64:
		return float64(x)
	case float64:
		return x + 1
	}
	return oddValues[r.Intn(len(oddValues))]
}

// TestSameJSON: sameJSON agrees with the encodings on the test objects
// against themselves, their copies and changed versions sharing the rest
// (both ways round), and answers for most of them.
func TestSameJSON(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	counts := map[string]int{}
	for _, o := range touchedObjects(t) {
		pairs := [][2]map[string]any{
			{o.live, o.live},
			{o.live, deepCopyJSON(o.live).(map[string]any)},
		}
		for i := 0; i < 300; i++ {
			m, _ := mutateShared(r, o.live, 0).(map[string]any)
			if m == nil {
				continue
			}
			pairs = append(pairs, [2]map[string]any{o.live, m}, [2]map[string]any{m, o.live})
		}
		for _, p := range pairs {
			same, ok := checkSameJSON(t, p[0], p[1])
			switch {
			case !ok:
				counts["unsure"]++
			case same:
				counts["same"]++
			default:
				counts["differ"]++
			}
		}
	}
	t.Logf("%v", counts)
	if counts["same"] < 50 || counts["differ"] < 1000 || counts["unsure"] < 50 || counts["unsure"] > counts["differ"] {
		t.Fatalf("the pairs do not test every answer: %v", counts)
	}
	for _, x := range oddValues {
		for _, y := range oddValues {
			checkSameJSON(t, map[string]any{"a": x}, map[string]any{"a": y})
			checkSameJSON(t, map[string]any{"a": []any{x}}, map[string]any{"a": []any{y}})
		}
	}
}

// FuzzSameJSON is TestSameJSON's changed objects with the seed fuzzed.
func FuzzSameJSON(f *testing.F) {
	objects := touchedObjects(f)
	f.Add(int64(1), uint8(0))
	f.Add(int64(31), uint8(5))
	f.Fuzz(func(t *testing.T, seed int64, which uint8) {
		r := rand.New(rand.NewSource(seed))
		o := objects[int(which)%len(objects)]
		a, _ := mutateShared(r, o.live, 0).(map[string]any)
		b, _ := mutateShared(r, a, 0).(map[string]any)
		if a != nil && b != nil {
			checkSameJSON(t, a, b)
			checkSameJSON(t, b, a)
		}
	})
}
