package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// fixtureObjects returns the request objects of every AdmissionReview and
// AdmissionRequest fixture in the repository (test/testdata/reviews and the
// examples' testdata), by file name.
func fixtureObjects(t testing.TB) map[string][]byte {
	t.Helper()
	var files []string
	for _, glob := range []string{"../../test/testdata/reviews/*.json", "../../examples/*/testdata/*.json"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	objs := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseReview(data)
		if err != nil || len(r.Object) == 0 {
			continue // settings files, DELETE requests
		}
		objs[f] = r.Object
	}
	if len(objs) < 10 {
		t.Fatalf("found only %d fixture objects", len(objs))
	}
	return objs
}

// checkSame fails unless Diff's fast path gives exactly what the reference gives.
func checkSame(t testing.TB, from, to []byte) {
	t.Helper()
	want, wantErr := diffDecoded(from, to)
	got, err := Diff(from, to)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("fast and reference Diff differ\nfrom %s\nto   %s\nfast      %s (%v)\nreference %s (%v)", from, to, got, err, want, wantErr)
	}
	// DiffIndexed, with to as a policy's answer holds it, indexed by ScanValue.
	value := bytes.Trim(to, " \t\r\n") // JSON's whitespace
	answer := append(append([]byte(`{"accepted":true,"mutated_object":`), value...), '}')
	var x fastjson.Index
	if end, ok := x.ScanValue(answer, 34); ok && end == 34+len(value) {
		got, err := DiffIndexed(from, answer, &x, 34, end)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("DiffIndexed and the reference differ\nfrom %s\nto   %s\nindexed   %s (%v)\nreference %s (%v)", from, to, got, err, want, wantErr)
		}
	}
}

// TestDiffRawMatchesReference compares the fast path with the reference on
// every fixture object against many edited copies of it, re-encoded with
// keys in random order, random whitespace, escaped characters and duplicate keys.
func TestDiffRawMatchesReference(t *testing.T) {
	for name, obj := range fixtureObjects(t) {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(name)))+"/"+filepath.Base(name), func(t *testing.T) {
			if _, ok := diffRaw(obj, obj); !ok {
				t.Fatalf("the fast path refused a fixture")
			}
			checkSame(t, obj, obj)
			r := rand.New(rand.NewSource(int64(len(obj))))
			for i := 0; i < 60; i++ {
				var v any
				dec := json.NewDecoder(bytes.NewReader(obj))
				dec.UseNumber()
				if err := dec.Decode(&v); err != nil {
					t.Fatal(err)
				}
				for e := r.Intn(4); e >= 0; e-- {
					v = mutate(r, v, 0)
				}
				to := encodeRandomly(r, v)
				checkSame(t, obj, to)
				if _, ok := diffRaw(obj, to); !ok {
					t.Fatalf("the fast path refused a well-formed document: %s", to)
				}
			}
		})
	}
}

// TestDiffRawCases covers what the fixtures may not: escapes, duplicate keys,
// HTML characters, non-ASCII keys, and inputs the fast path hands back.
func TestDiffRawCases(t *testing.T) {
	for _, c := range [][2]string{
		{`{"a":"x/y"}`, `{"a":"x\/y"}`},
		{`{"a":"\u0041"}`, `{"a":"A"}`},
		{`{"a":"A"}`, `{"a":"B<&>"}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"a":1}`, `{"a":1,"a":3}`},
		{`{"k\u00e9y/~":1}`, `{"k\u00e9y/~":2,"<b>":{"z":1,"a":[1,2.50,-0,1e3]}}`},
		{"{\"a\":\"\xff\"}", "{\"a\":\"\xfe\"}"},
		{"{\"\xff\":1,\"\xfe\":2}", `{"\ufffd":2}`},
		{"{\"a\":\"\xff\"}", "{\"b\":\"\xfe<\"}"},
		{`{"a":[1,2,3,4]}`, `{"a":[4,1,2,3,4,5]}`},
		{`{"a":[{"x":1},{"x":2}]}`, `{"a":[{"x":2},{"x":1}]}`},
		{`{"a":{"b":1}}`, `{"a":[1]}`},
		{`{"a":1.0}`, `{"a":1}`},
		{`{"a":"\u2028"}`, `{"a":"\u2029"}`},
		{`{"a":1}  `, `  {"a":2}`},
		{`{"a":1} x`, `{"a":2}`},
		{`{"a":1}`, `{"a":2} {"b":1}`},
		{`{"a":1}`, `{"a":`},
		{`{"a":01}`, `{"a":2}`},
		{`[1,2]`, `{"a":1}`},
		{`null`, `{"a":1}`},
		{`"s"`, `"t"`},
		{``, `{"a":1}`},
		{`{"a":1}`, ``},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), `[]`},
	} {
		checkSame(t, []byte(c[0]), []byte(c[1]))
	}
}

func FuzzDiffRaw(f *testing.F) {
	f.Add(`{"a":1,"l":[1,{"x":2}]}`, `{"a":2,"l":[{"x":3},1,4]}`)
	f.Add(`{"a":"\u0041","a":2}`, `{"a":"A"}`)
	f.Add(`{"spec":{"containers":[{"name":"a"}]}}`, `{"spec":{"containers":[{"name":"b"},{"name":"a"}]}}`)
	f.Fuzz(func(t *testing.T, from, to string) {
		checkSame(t, []byte(from), []byte(to))
	})
}

// BenchmarkDiff compares the fast path with the reference on the 5 KB Pod
// fixture with the capabilities-drop mutation ("BPF" appended to the drop list
// of the container that adds a capability), the mutated object either
// re-encoded whole (what a policy using encoding/json answers) or edited in
// place (what a policy using sdk/fastjson answers).
func BenchmarkDiff(b *testing.B) {
	from := fixtureObjects(b)["../../test/testdata/reviews/pod.json"]
	edited := bytes.Replace(from, []byte(`"NET_BIND_SERVICE"
                ],
                "drop": [
                  "ALL"`), []byte(`"NET_BIND_SERVICE"
                ],
                "drop": [
                  "ALL","BPF"`), 1)
	if bytes.Equal(from, edited) {
		b.Fatal("the Pod fixture has no drop list to edit")
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(edited))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		b.Fatal(err)
	}
	reencoded, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		to   []byte
		diff func(a, b []byte) ([]byte, error)
	}{
		{"reencoded/fast", reencoded, Diff}, {"reencoded/reference", reencoded, diffDecoded},
		{"edited/fast", edited, Diff}, {"edited/reference", edited, diffDecoded},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if p, err := bc.diff(from, bc.to); err != nil || p == nil {
					b.Fatal(err, p)
				}
			}
		})
	}
}

// mutate makes one random edit somewhere in v and returns the new v.
func mutate(r *rand.Rand, v any, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > 0 && r.Intn(4) != 0 {
			k := keys[r.Intn(len(keys))]
			switch r.Intn(6) {
			case 0:
				delete(x, k)
			default:
				x[k] = mutate(r, x[k], depth+1)
			}
			return x
		}
		x[fmt.Sprintf("k%d/~<%d>", depth, r.Intn(3))] = randomValue(r)
		return x
	case []any:
		switch {
		case len(x) > 0 && r.Intn(3) != 0:
			i := r.Intn(len(x))
			x[i] = mutate(r, x[i], depth+1)
		case len(x) > 0 && r.Intn(2) == 0:
			i := r.Intn(len(x))
			x = append(x[:i], x[i+1:]...)
		default:
			i := r.Intn(len(x) + 1)
			x = slices.Insert(x, i, randomValue(r))
		}
		return x
	}
	if r.Intn(2) == 0 {
		return randomValue(r)
	}
	return v
}

func randomValue(r *rand.Rand) any {
	switch r.Intn(7) {
	case 0:
		return json.Number([]string{"0", "-1", "2.5", "1e3", "12345678901234567890"}[r.Intn(5)])
	case 1:
		return []string{"BPF", "ALL", "a/b~c", "é<&>", "x\u2028y", ""}[r.Intn(6)]
	case 2:
		return r.Intn(2) == 0
	case 3:
		return nil
	case 4:
		return []any{"BPF", json.Number("1")}
	case 5:
		return map[string]any{"z": "1", "a": []any{}}
	}
	return map[string]any{}
}

// encodeRandomly writes v as JSON with object keys in random order, random
// whitespace, some characters escaped and, now and then, a duplicate key
// whose first value the decoder discards.
func encodeRandomly(r *rand.Rand, v any) []byte {
	var b bytes.Buffer
	var enc func(v any)
	ws := func() {
		if r.Intn(8) == 0 {
			b.WriteString([]string{" ", "\n  ", "\t", "\r\n"}[r.Intn(4)])
		}
	}
	str := func(s string) {
		b.WriteByte('"')
		for _, c := range s {
			switch {
			case c == '"' || c == '\\' || c < 0x20:
				fmt.Fprintf(&b, `\u%04x`, c)
			case c == '/' && r.Intn(2) == 0:
				b.WriteString(`\/`)
			case c < utf8.RuneSelf && r.Intn(40) == 0:
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('"')
	}
	enc = func(v any) {
		ws()
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			b.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(',')
				}
				if r.Intn(30) == 0 {
					str(k)
					b.WriteString(`:"discarded",`)
				}
				ws()
				str(k)
				ws()
				b.WriteByte(':')
				enc(x[k])
			}
			ws()
			b.WriteByte('}')
		case []any:
			b.WriteByte('[')
			for i, e := range x {
				if i > 0 {
					b.WriteByte(',')
				}
				enc(e)
			}
			ws()
			b.WriteByte(']')
		case string:
			str(x)
		default:
			out, _ := json.Marshal(x)
			b.Write(out)
		}
		ws()
	}
	enc(v)
	return b.Bytes()
}
