package jsonengine

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestJSONAgainstEncodingJSON: decodeFast gives what decodeObjectLibrary
// (json.Decoder with UseNumber, then int64 or float64) gives, and encodeFast
// the bytes json.Marshal gives, on realistic objects (test/testdata/reviews:
// Pod, Deployment, Service, Ingress, a 50 KB ConfigMap) and on the edges:
// escapes, HTML characters, U+2028, invalid UTF-8, lone surrogates,
// duplicate keys, integers at and past int64, exponents, -0, floats out of
// range, deep nesting; and they decline what they must (trailing data,
// another top-level value, malformed JSON, NaN, other Go types).
func TestJSONAgainstEncodingJSON(t *testing.T) {
	inputs := []string{
		`{}`, ` {"a" : [ 1 , 2 ] } `, `{"a":{},"b":[],"c":null,"d":true,"e":false}`,
		`{"s":"\u003c\u003e\u0026 <>& \u2028\u2029 \ud83d\ude00 \ud800 \udc00x \"\\\/\b\f\n\r\t\u0001"}`,
		"{\"bad\":\"\xff\xfe a \xc3\x28 \xed\xa0\x80\",\"\xff\":1}",
		`{"dup":1,"dup":{"x":2},"dup":"last"}`,
		`{"n":[0,-0,1,-1,9223372036854775807,-9223372036854775808,9223372036854775808,-9223372036854775809,1.0,1e3,1E3,1e-7,1.5e300,1e400,-1e400,1e-400,0.000001,0.0000001,1e20,1e21,123456789012345678901234567890]}`,
		`{"deep":` + strings.Repeat(`[`, 900) + strings.Repeat(`]`, 900) + `}`,
	}
	files, _ := filepath.Glob("../../../test/testdata/reviews/*.json")
	if len(files) < 4 {
		t.Fatalf("test/testdata/reviews: %d files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var review struct {
			Request struct{ Object json.RawMessage } `json:"request"`
		}
		if err := json.Unmarshal(b, &review); err != nil || review.Request.Object == nil {
			continue
		}
		inputs = append(inputs, string(review.Request.Object), string(b))
	}
	for i, in := range inputs {
		got, ok := decodeFast([]byte(in))
		if !ok {
			t.Fatalf("input %d: decodeFast declined %.200q", i, in)
		}
		want, err := decodeObjectLibrary(bytes.TrimSpace([]byte(in)))
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("input %d: decodeFast %.500v\nencoding/json %.500v", i, got, want)
		}
		if hasInf(want) {
			if _, ok := encodeFast(want); ok {
				t.Fatalf("input %d: encodeFast accepted an infinity", i)
			}
			continue
		}
		wantB, err := json.Marshal(want)
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		gotB, ok := encodeFast(want)
		if !ok || !bytes.Equal(gotB, wantB) {
			t.Fatalf("input %d: encodeFast (ok %v)\n%.500s\njson.Marshal\n%.500s", i, ok, gotB, wantB)
		}
	}
	for _, in := range []string{`{"a":1} x`, `{"a":1}{}`, `[1]`, `"s"`, `1`, `null`, `{"a":}`, `{"a":1,}`, "{\"a\":\"\x01\"}", `{"deep":` + strings.Repeat(`[`, 1100) + strings.Repeat(`]`, 1100) + `}`} {
		if m, ok := decodeFast([]byte(in)); ok {
			t.Errorf("decodeFast(%.60q) = %v, want declined", in, m)
		}
	}
	for _, v := range []map[string]any{
		{"nan": math.NaN()}, {"inf": math.Inf(1)}, {"i32": int32(1)}, {"u": uint64(1)}, {"s": []string{"a"}}, {"m": map[string]string{}},
		{"n": json.Number("1")}, {"deep": deepList(1100)},
	} {
		if b, ok := encodeFast(v); ok {
			t.Errorf("encodeFast(%T) = %.60s, want declined", v, b)
		}
	}
	for _, v := range []map[string]any{{"int": 7, "nilmap": map[string]any(nil), "nillist": []any(nil), "k<&>": "v"}} {
		b, ok := encodeFast(v)
		want, _ := json.Marshal(v)
		if !ok || !bytes.Equal(b, want) {
			t.Errorf("encodeFast = %s (%v), json.Marshal %s", b, ok, want)
		}
	}
}

func hasInf(v any) bool {
	switch x := v.(type) {
	case float64:
		return math.IsInf(x, 0)
	case map[string]any:
		for _, e := range x {
			if hasInf(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasInf(e) {
				return true
			}
		}
	}
	return false
}

func deepList(n int) any {
	var v any = []any{}
	for i := 0; i < n; i++ {
		v = []any{v}
	}
	return v
}
