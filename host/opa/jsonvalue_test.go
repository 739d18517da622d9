package opa

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/ast"
)

// TestJSONValue: jsonValue agrees with ast.ValueFromReader.
func TestJSONValue(t *testing.T) {
	for _, doc := range []string{
		`{}`, `[]`, `""`, `"a\"b\u00e9\n"`, `0`, `-1.5e3`, `123456789012345678901234567890`,
		`true`, `false`, `null`, ` {"a": [1, "x", {"b": null}], "c": true} `, `["é", "\ud83d\ude00"]`,
	} {
		want, err := ast.ValueFromReader(bytes.NewReader([]byte(doc)))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		got, err := jsonValue([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if got.Compare(want) != 0 {
			t.Errorf("%s: got %v, want %v", doc, got, want)
		}
	}
	for _, bad := range []string{``, `{`, `[1,`, `{"a" 1}`, `"abc`, `tru`, `1 2`, `-`, `{"a":1,}`, `[1 2]`} {
		if _, err := jsonValue([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null]}`, `"\u0041"`, `-0.5e-3`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := jsonValue(b) // never panics
		if valid := json.Valid(b); valid != (err == nil) {
			t.Fatalf("%q: json.Valid %v, jsonValue's error %v", b, valid, err)
		}
		if err != nil {
			return
		}
		want, werr := ast.ValueFromReader(bytes.NewReader(b))
		if err == nil && werr == nil && got.Compare(want) != 0 {
			t.Fatalf("%q: got %v, want %v", b, got, want)
		}
	})
}

// BenchmarkJSONValue converts the arguments a Gatekeeper policy passes its
// builtins: short strings, and an object with a few members.
func BenchmarkJSONValue(b *testing.B) {
	args := [][]byte{[]byte(`"registry.example.com/app:1.2"`), []byte(`"^registry\\.example\\.com/"`),
		[]byte(`{"name":"app","image":"registry.example.com/app:1.2","ports":[{"containerPort":8080}],"env":[{"name":"A","value":"\u00e9"}]}`)}
	b.ReportAllocs()
	for b.Loop() {
		for _, a := range args {
			if _, err := jsonValue(a); err != nil {
				b.Fatal(err)
			}
		}
	}
}
