package fastjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// toAny builds, by walking v with this package, the value encoding/json
// decodes v's bytes to (numbers as json.Number).
func toAny(t testing.TB, v Value) any {
	switch v.Kind() {
	case Object:
		m := map[string]any{}
		v.ForEachMember(func(k, val Value) bool {
			s, ok := k.Str()
			if !ok {
				t.Fatalf("key %s is not a string", k.Raw())
			}
			m[s] = toAny(t, val)
			return true
		})
		return m
	case Array:
		l := []any{}
		v.ForEach(func(_ int, e Value) bool { l = append(l, toAny(t, e)); return true })
		return l
	case String:
		s, _ := v.Str()
		return s
	case Number:
		return json.Number(v.Raw())
	case Bool:
		b, _ := v.Bool()
		return b
	case Null:
		return nil
	}
	t.Fatalf("missing value")
	return nil
}

func decode(t testing.TB, data []byte) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := dec.Decode(&v)
	return v, err
}

// checkWalk fails unless Valid agrees with json.Valid and, for valid data,
// walking gives what encoding/json decodes.
func checkWalk(t testing.TB, data []byte) {
	t.Helper()
	if Valid(data) != json.Valid(data) {
		t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, Valid(data), json.Valid(data))
	}
	checkScanValue(t, data)
	v, perr := Parse(data)
	if (perr != nil) == json.Valid(data) {
		t.Fatalf("Parse(%q): %v, json.Valid says %v", data, perr, json.Valid(data))
	}
	if perr != nil {
		if v.Exists() || v.Get("a").Exists() || v.Index(0).Exists() || v.Len() != 0 {
			t.Fatal("a failed Parse must give a missing value")
		}
		return
	}
	want, err := decode(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := toAny(t, v); !reflect.DeepEqual(got, want) {
		t.Fatalf("walk of %q:\n got %#v\nwant %#v", data, got, want)
	}
	checkLookups(t, v, want, 0)
	if got := iterAny(t, v); !reflect.DeepEqual(got, want) {
		t.Fatalf("Iter walk of %q:\n got %#v\nwant %#v", data, got, want)
	}
	// A Parser reused across every document of the test (its index full of
	// the previous documents' entries) walks to the same value.
	rv, err := reused.Parse(data)
	if err != nil {
		t.Fatalf("Parser.Parse(%q): %v, Parse succeeded", data, err)
	}
	if got := toAny(t, rv); !reflect.DeepEqual(got, want) {
		t.Fatalf("walk of %q with a reused Parser:\n got %#v\nwant %#v", data, got, want)
	}
	checkIndex(t, data, v)
}

// reusedIndex is the Index checkIndex scans every document with.
var reusedIndex Index

// checkIndex fails unless Index.Scan of data (valid, parsed to v) finds
// v's offsets and records, at the start of every value and key of v, its
// length and, for strings, whether they hold a backslash or a byte from 0x80
// on.
func checkIndex(t testing.TB, data []byte, v Value) {
	t.Helper()
	s, e, ok := reusedIndex.Scan(data)
	if !ok || s != v.s || e != v.e {
		t.Fatalf("Index.Scan(%q) = %d, %d, %v; Parse found %d, %d", data, s, e, ok, v.s, v.e)
	}
	var check func(v Value)
	check = func(v Value) {
		if got := int(reusedIndex.Len[v.s]); got != v.e-v.s {
			t.Fatalf("Index.Len of %s at %d = %d", v.Raw(), v.s, got)
		}
		if v.Kind() == String {
			want := bytes.IndexByte(v.Raw(), '\\') >= 0 || !isASCII(v.Raw())
			if reusedIndex.Escaped[v.s] != want {
				t.Fatalf("Index.Escaped of %s = %v", v.Raw(), !want)
			}
			var text string
			if err := json.Unmarshal(v.Raw(), &text); err != nil || string(Unquote(v.Raw())) != text {
				t.Fatalf("Unquote(%s) = %q, encoding/json decodes %q (%v)", v.Raw(), Unquote(v.Raw()), text, err)
			}
		}
		for it := v.Iter(); it.Next(); {
			if it.Key().Exists() {
				check(it.Key())
			}
			check(it.Value())
		}
	}
	check(v)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// iterAny is toAny with Iter in place of ForEach and ForEachMember.
func iterAny(t testing.TB, v Value) any {
	switch v.Kind() {
	case Object:
		m := map[string]any{}
		for it := v.Iter(); it.Next(); {
			s, ok := it.Key().Str()
			if !ok {
				t.Fatalf("key %s is not a string", it.Key().Raw())
			}
			m[s] = iterAny(t, it.Value())
		}
		return m
	case Array:
		l := []any{}
		for it := v.Iter(); it.Next(); {
			if it.Key().Exists() {
				t.Fatalf("an array element has a key")
			}
			l = append(l, iterAny(t, it.Value()))
		}
		return l
	}
	it := v.Iter()
	if it.Next() {
		t.Fatalf("Iter of a %v walks", v.Kind())
	}
	return toAny(t, v)
}

// reused is the Parser checkWalk parses every document with, one after the
// other.
var reused Parser

// checkLookups checks Get and Index against the decoded value, at every level:
// Get of each key is the last member of that name, Index of each position is
// that element, and out-of-range or absent lookups are missing. It goes 16
// levels deep (each level compares whole subtrees).
func checkLookups(t testing.TB, v Value, want any, depth int) {
	t.Helper()
	if depth > 16 {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		for k, wv := range w {
			got := v.Get(k)
			if !got.Exists() {
				t.Fatalf("Get(%q) of %s is missing", k, v.Raw())
			}
			if g := toAny(t, got); !reflect.DeepEqual(g, wv) {
				t.Fatalf("Get(%q) of %s = %#v, want %#v", k, v.Raw(), g, wv)
			}
			checkLookups(t, got, wv, depth+1)
		}
		if v.Get("\x00no such key").Exists() || v.Index(0).Exists() {
			t.Fatalf("absent lookups of object %s exist", v.Raw())
		}
	case []any:
		for i, wv := range w {
			got := v.Index(i)
			if g := toAny(t, got); !reflect.DeepEqual(g, wv) {
				t.Fatalf("Index(%d) of %s = %#v, want %#v", i, v.Raw(), g, wv)
			}
			checkLookups(t, got, wv, depth+1)
		}
		if v.Index(len(w)).Exists() || v.Index(-1).Exists() || v.Get("a").Exists() {
			t.Fatalf("out-of-range lookups of array %s exist", v.Raw())
		}
	}
}

// checkScanValue: ScanValue of the value data holds, inside a larger
// document, ends where the value ends when data is JSON, and only ever
// accepts a prefix that is JSON.
func checkScanValue(t testing.TB, data []byte) {
	t.Helper()
	value := bytes.Trim(data, " \t\r\n") // JSON's whitespace
	doc := append(append([]byte(`{"v":`), value...), `,"w":[1]}`...)
	var x Index
	end, ok := x.ScanValue(doc, 5)
	if json.Valid(data) && (!ok || end != 5+len(value) || int(x.Len[5]) != len(value)) {
		t.Fatalf("ScanValue of %q in %q = %d, %v; want %d, true", value, doc, end, ok, 5+len(value))
	}
	if ok && !json.Valid(doc[5:end]) {
		t.Fatalf("ScanValue accepted %q, which is not JSON", doc[5:end])
	}
	if _, ok := x.ScanValue(doc, len(doc)); ok {
		t.Fatal("ScanValue past the end accepted")
	}
}

func mustParse(t testing.TB, data []byte) Value {
	t.Helper()
	v, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(%q): %v", data, err)
	}
	return v
}

var cases = []string{
	`{"a":1,"b":[true,false,null,"x"],"c":{"d":-1.5e3}}`,
	` { "a" : "\u00e9\ud83d\ude00\ud800\u0041\"\\\/\b\f\n\r\t" } `,
	`{"a":1,"a":{"b":2}}`,
	"{\"\xff\":\"\xfe\xed\"}",
	`"\ud800\ud800"`, `"\udc00x"`, `"\ud83d\u0041"`,
	`[]`, `{}`, `[[],{}]`, `0`, `-0.0e-0`, `01`, `1.`, `.5`, `+1`, `tru`, `nulls`,
	`{"a":}`, `{"a" 1}`, `[1,]`, `{"a":1,}`, `[1 2]`, `"\x"`, `"\u12g4"`, "\"a\tb\"", `{"a":"b"}}`, `]`, ``, ` `,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

func TestWalkMatchesEncodingJSON(t *testing.T) {
	for _, c := range cases {
		checkWalk(t, []byte(c))
	}
	for name, data := range fixtures(t) {
		t.Run(name, func(t *testing.T) { checkWalk(t, data) })
	}
}

func FuzzWalk(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkWalk(t, data) })
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"plain", "<a href=\"x\">&</a>", "\u2028\u2029\x00\x1f\x7f", "\xff\xfe", "é😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Quote(s); !bytes.Equal(got, want) {
			t.Fatalf("Quote(%q) = %s, json.Marshal gives %s", s, got, want)
		}
		if got := AppendQuoteBytes([]byte("x"), []byte(s)); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Fatalf("AppendQuoteBytes(x, %q) = %s, json.Marshal gives %s", s, got, want)
		}
		if got, _ := mustParse(t, Quote(s)).Str(); utf8.ValidString(s) && got != s {
			t.Fatalf("Str(Quote(%q)) = %q", s, got)
		}
		// The minimal form: the bytes its rule says, and the value
		// json.Marshal's form decodes to.
		min := AppendQuoteMinimal(nil, s)
		if w := minimalQuote(s); string(min) != w {
			t.Fatalf("AppendQuoteMinimal(%q) = %s, want %s", s, min, w)
		}
		var fromMin, fromMarshal string
		if err := json.Unmarshal(min, &fromMin); err != nil {
			t.Fatalf("AppendQuoteMinimal(%q) = %s: %v", s, min, err)
		}
		if err := json.Unmarshal(want, &fromMarshal); err != nil || fromMin != fromMarshal {
			t.Fatalf("AppendQuoteMinimal(%q) = %s decodes to %q, json.Marshal's %s to %q", s, min, fromMin, want, fromMarshal)
		}
	})
}

// minimalQuote is AppendQuoteMinimal's rule byte by byte: the quote and the
// backslash escaped, \n \r \t short, other control characters as \u00xx,
// every other byte as it is.
func minimalQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteString(`\` + string(c))
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// fixtures returns the repository's JSON fixtures: the realistic reviews and
// the examples' requests.
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob("../../test/testdata/reviews/*.json")
	more, _ := filepath.Glob("../../examples/*/testdata/*.json")
	files = append(files, more...)
	if len(files) < 10 {
		t.Fatalf("found %d fixtures", len(files))
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(filepath.Dir(filepath.Dir(f)))+"/"+filepath.Base(f)] = data
	}
	return out
}

func TestGet(t *testing.T) {
	doc := mustParse(t, []byte(`{"spec":{"containers":[{"name":"a"},{"name":"b","x":1,"x":2}]},"k\/":"v"}`))
	if s, _ := doc.Get("spec", "containers").Index(1).Get("name").Str(); s != "b" {
		t.Fatalf("name = %q", s)
	}
	if n, _ := doc.Get("spec", "containers").Index(1).Get("x").Int(); n != 2 {
		t.Fatalf("duplicate key: got %d, want the last (2)", n)
	}
	if !doc.Get("k/").Equals("v") {
		t.Fatal("escaped key not found")
	}
	for _, missing := range []Value{doc.Get("nope"), doc.Get("spec", "containers", "x"), doc.Get("spec", "containers").Index(2), doc.Get("k/", "x")} {
		if missing.Exists() || missing.Kind() != Missing || !missing.IsNull() {
			t.Fatalf("want missing, got %s", missing.Raw())
		}
	}
	if l := doc.Get("spec", "containers").Len(); l != 2 {
		t.Fatalf("Len = %d", l)
	}
}

// TestEditorMatchesEncodingJSON makes random edits to every fixture with an
// Editor and the same changes to the document decoded by encoding/json; the
// edited bytes must decode to the changed value.
func TestEditorMatchesEncodingJSON(t *testing.T) {
	for name, data := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewSource(int64(len(data))))
			for i := 0; i < 50; i++ {
				want, err := decode(t, data)
				if err != nil {
					t.Fatal(err)
				}
				root := mustParse(t, data)
				ed := NewEditor(root)
				want = randomEdit(t, r, ed, root, want)
				out, err := ed.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if !json.Valid(out) {
					t.Fatalf("edited document is not JSON: %s", out)
				}
				got, _ := decode(t, out)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("edited document decodes to\n%#v\nwant\n%#v", got, want)
				}
				answer, err := AppendMutateRequest([]byte("kept"), ed)
				if wantAnswer := "kept" + string(MutateRequest(out)); err != nil || string(answer) != wantAnswer {
					t.Fatalf("AppendMutateRequest = %s, %v\nwant %s", answer, err, wantAnswer)
				}
			}
		})
	}
}

// randomEdit walks down a random path and makes one edit there, in ed and in
// the decoded value, which it returns.
func randomEdit(t *testing.T, r *rand.Rand, ed *Editor, v Value, dec any) any {
	newVal := []any{"BPF", json.Number("7"), map[string]any{"k": "v"}, []any{}, nil, true}[r.Intn(6)]
	raw, _ := json.Marshal(newVal)
	switch x := dec.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		op := r.Intn(5)
		if len(keys) > 0 && op < 3 {
			k := keys[r.Intn(len(keys))]
			x[k] = randomEdit(t, r, ed, v.Get(k), x[k])
			return x
		}
		if len(keys) > 0 && op == 3 {
			k := keys[r.Intn(len(keys))]
			ed.Delete(v, k)
			delete(x, k)
			return x
		}
		k := fmt.Sprintf("new/%d<é>", r.Intn(3))
		if len(keys) > 0 && r.Intn(2) == 0 {
			k = keys[r.Intn(len(keys))]
		}
		ed.Set(v, k, raw)
		x[k] = newVal
		return x
	case []any:
		if len(x) > 0 && r.Intn(2) == 0 {
			i := r.Intn(len(x))
			x[i] = randomEdit(t, r, ed, v.Index(i), x[i])
			return x
		}
		ed.Append(v, raw)
		return append(x, newVal)
	}
	ed.Replace(v, raw)
	return newVal
}

func TestEditorErrors(t *testing.T) {
	data := []byte(`{"a":{"b":[1]}}`)
	doc := mustParse(t, data)
	ed := NewEditor(doc)
	ed.Replace(doc.Get("a"), []byte(`1`))
	ed.Append(doc.Get("a", "b"), []byte(`2`))
	if _, err := ed.Bytes(); err != ErrOverlap {
		t.Fatalf("want ErrOverlap, got %v", err)
	}
	if out, err := AppendMutateRequest([]byte("x"), ed); err != ErrOverlap || string(out) != "x" {
		t.Fatalf("AppendMutateRequest: want ErrOverlap and dst unchanged, got %q, %v", out, err)
	}
	ed = NewEditor(doc)
	ed.Append(doc.Get("a"), []byte(`2`)) // not an array
	if _, err := ed.Bytes(); err != ErrNotEditable {
		t.Fatalf("want ErrNotEditable, got %v", err)
	}
	ed = NewEditor(doc)
	ed.Replace(mustParse(t, []byte(`{"a":1}`)), []byte(`2`)) // another document
	if _, err := ed.Bytes(); err != ErrNotEditable {
		t.Fatalf("want ErrNotEditable, got %v", err)
	}
	ed = NewEditor(doc.Get("a"))
	ed.Replace(doc, []byte(`2`)) // outside the edited value
	if _, err := ed.Bytes(); err != ErrNotEditable {
		t.Fatalf("want ErrNotEditable, got %v", err)
	}
	ed = NewEditor(doc.Get("a"))
	ed.Append(doc.Get("a", "b"), []byte(`2`))
	if out, err := ed.Bytes(); err != nil || string(out) != `{"b":[1,2]}` {
		t.Fatalf("editing a value inside a document: %s, %v", out, err)
	}
	ed = NewEditor(doc)
	if out, err := ed.Bytes(); err != nil || ed.Changed() || &out[0] != &data[0] {
		t.Fatal("no edits must give the document itself")
	}
}

// TestAppendMutateRequestReusesDst: the answer is built in dst, without an
// allocation, when dst has room (a guest keeps it from call to call), and
// with one when it has not.
func TestAppendMutateRequestReusesDst(t *testing.T) {
	data := []byte(`{"spec":{"containers":[{"securityContext":{"capabilities":{"add":["A"],"drop":["B"]}}}]}}`)
	doc := mustParse(t, data)
	ed := NewEditor(doc)
	ed.Append(doc.Get("spec", "containers").Index(0).Get("securityContext", "capabilities", "drop"), []byte(`"BPF"`))
	want := `{"accepted":true,"mutated_object":{"spec":{"containers":[{"securityContext":{"capabilities":{"add":["A"],"drop":["B","BPF"]}}}]}}}`
	var dst []byte
	allocs := testing.AllocsPerRun(10, func() { dst, _ = AppendMutateRequest(nil, ed) })
	if string(dst) != want || allocs != 1 {
		t.Fatalf("first answer: %s with %v allocations, want %s with 1", dst, allocs, want)
	}
	allocs = testing.AllocsPerRun(100, func() { dst, _ = AppendMutateRequest(dst[:0], ed) })
	if string(dst) != want || allocs != 0 {
		t.Fatalf("answer into a kept buffer: %s with %v allocations, want %s with none", dst, allocs, want)
	}
}

func BenchmarkEditPod(b *testing.B) {
	data := fixtures(b)["testdata/pod.json"]
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		root, _ := Parse(data)
		obj := root.Get("request", "object")
		ed := NewEditor(obj)
		obj.Get("spec", "containers").ForEach(func(_ int, c Value) bool {
			caps := c.Get("securityContext", "capabilities")
			if caps.Get("add").Len() > 0 {
				ed.Append(caps.Get("drop"), []byte(`"BPF"`))
			}
			return true
		})
		if _, err := ed.Bytes(); err != nil || !ed.Changed() {
			b.Fatal(err)
		}
	}
}

func FuzzAppendFloat(f *testing.F) {
	for _, x := range []float64{0, -0.0, 1, -1.5, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789e30, 5e-324, math.MaxFloat64, math.Inf(-1), math.NaN()} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		got, ok := AppendFloat([]byte("x"), x)
		want, err := json.Marshal(x)
		if ok != (err == nil) || (ok && string(got[1:]) != string(want)) || string(got[:1]) != "x" {
			t.Fatalf("AppendFloat(%v) = %s, %v; json.Marshal gives %s, %v", x, got, ok, want, err)
		}
	})
}
