package ujson_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson"
	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson/ujsontest"
)

// The options of engine's decodeUnstructured and encodeUnstructured (the
// zero value: sigs.k8s.io/json's numbers, Go int declined), for which the
// tables below were written; every decoding test runs in each mode
// (ujsontest.Modes) against that mode's reference too.
var sigsOptions = ujson.Options{}

// TestDecodeUnstructured: sigsOptions on the table (ok: accepted, as
// sigs.k8s.io/json accepts it), and each mode against its reference: an
// input is accepted when the reference accepts it, but for what is declined
// by design in every mode (refOK: deep nesting, a top-level null).
func TestDecodeUnstructured(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	deepArr := func(n int) string { return `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + "}" }
	for _, tc := range []struct {
		name string
		in   string
		ok   bool // decodeUnstructured must accept it (sigsjson does)
		// refOK: sigsjson accepts what decodeUnstructured declines by
		// design (deep nesting, a top-level null).
		refOK bool
	}{
		{"empty", `{}`, true, false},
		{"spaces", " \t\r\n{ \t\r\n\"a\" \n: \r1 \t, \"b\":[ 1 , 2 ] , \"c\" : { } }\n\t ", true, false},
		{"kinds", `{"s":"x","i":1,"f":1.5,"t":true,"f2":false,"n":null,"a":[1,"x",null,{}],"o":{"p":{"q":[]}}}`, true, false},
		{"empty nested", `{"a":{},"b":[],"c":[[]],"d":[{}],"e":""}`, true, false},
		{"duplicate keys last wins", `{"a":1,"b":2,"a":{"x":1},"a":3}`, true, false},
		{"duplicate nested", `{"a":{"b":1,"b":[2]},"a":{"c":1,"c":2}}`, true, false},
		{"escapes", `{"a":"\"\\\/\b\f\n\r\t","\"k\\":"v"}`, true, false},
		{"unicode escapes", `{"a":"\u00e9\u00E9\u0041\u0000\u001f\u2028\uffff\u0041b"}`, true, false},
		{"surrogate pair", `{"a":"\ud83d\ude00","b":"x\uD83D\uDE00y"}`, true, false},
		{"lone high surrogate", `{"a":"\ud83d","b":"\ud83dx","c":"\ud83d\u0041","d":"\ud83d\ud83d\ude00"}`, true, false},
		{"lone low surrogate", `{"a":"\ude00","b":"\ude00\ud83d","c":"\ude00\ude00"}`, true, false},
		{"surrogate then escape", `{"a":"\ud83d\n","b":"\ud83d\\u"}`, true, false},
		{"utf8", `{"é":"日本語 ✓ 😀","k":"\u65e5"}`, true, false},
		{"invalid utf8", "{\"a\":\"\xff\",\"b\":\"x\xc3\",\"c\":\"\xed\xa0\x80\",\"\xfe\":1,\"d\":\"\xf0\x9f\x98\"}", true, false},
		{"invalid utf8 and escapes", "{\"a\":\"\xff\\n\xc3\xa9\xc3\"}", true, false},
		{"del and high ascii", "{\"a\":\"\x7f\"}", true, false},
		{"ints", `{"a":0,"b":-0,"c":1,"d":-1,"e":9223372036854775807,"f":-9223372036854775808,"g":123456789012345678,"h":-999999999999999999,"i":1234567890123456789}`, true, false},
		{"beyond int64", `{"a":9223372036854775808,"b":-9223372036854775809,"c":100000000000000000000000,"d":12345678901234567890123456789}`, true, false},
		{"floats", `{"a":1.0,"b":1e3,"c":1E-7,"d":1.5,"e":0.1,"f":1e21,"g":1e-7,"h":-0.0,"i":1e+2,"j":-1.5e-3,"k":0e0,"l":0.000001,"m":123456789.123456789,"n":1E400,"o":5e-324}`, false, false},
		{"float in range", `{"a":1.0,"b":1e3,"c":1E-7,"d":1.5,"e":0.1,"f":1e21,"g":1e-7,"h":-0.0,"i":1e+2,"j":-1.5e-3,"k":0e0,"l":0.000001,"m":123456789.123456789,"o":5e-324,"p":1.7976931348623157e308}`, true, false},
		{"underflow", `{"a":1e-400,"b":-1e-400}`, true, false},
		{"overflow", `{"a":1e400}`, false, false},
		{"overflow negative", `{"a":-1e309}`, false, false},
		{"long exponent int", `{"a":1e0000000000000000000000000001}`, true, false},
		{"deep", deep(500), true, false},
		{"deep arrays", deepArr(500), true, false},
		{"too deep for us", deep(1500), false, true},
		{"too deep for sigsjson", deep(10001), false, false},

		// Refused by sigsjson.
		{"nothing", ``, false, false},
		{"spaces only", `  `, false, false},
		{"null", `null`, false, true},
		{"array", `[]`, false, false},
		{"string", `"a"`, false, false},
		{"number", `1`, false, false},
		{"trailing garbage", `{} x`, false, false},
		{"trailing object", `{}{}`, false, false},
		{"trailing comma", `{"a":1,}`, false, false},
		{"trailing comma array", `{"a":[1,]}`, false, false},
		{"missing colon", `{"a" 1}`, false, false},
		{"missing value", `{"a":}`, false, false},
		{"unquoted key", `{a:1}`, false, false},
		{"single quotes", `{'a':1}`, false, false},
		{"number key", `{1:1}`, false, false},
		{"unterminated", `{"a":1`, false, false},
		{"unterminated string", `{"a":"x}`, false, false},
		{"unterminated key", `{"a`, false, false},
		{"control char", "{\"a\":\"\x01\"}", false, false},
		{"newline in string", "{\"a\":\"\n\"}", false, false},
		{"bad escape", `{"a":"\x"}`, false, false},
		{"single quote escape", `{"a":"\'"}`, false, false},
		{"short unicode", `{"a":"\u12"}`, false, false},
		{"bad hex", `{"a":"\u12g4"}`, false, false},
		{"surrogate then bad hex", `{"a":"\ud83d\uzzzz"}`, false, false},
		{"leading zero", `{"a":01}`, false, false},
		{"leading plus", `{"a":+1}`, false, false},
		{"bare minus", `{"a":-}`, false, false},
		{"dot no digits", `{"a":1.}`, false, false},
		{"dot first", `{"a":.5}`, false, false},
		{"exp no digits", `{"a":1e}`, false, false},
		{"exp sign no digits", `{"a":1e+}`, false, false},
		{"hex number", `{"a":0x10}`, false, false},
		{"NaN", `{"a":NaN}`, false, false},
		{"Infinity", `{"a":Infinity}`, false, false},
		{"tru", `{"a":tru}`, false, false},
		{"truex", `{"a":truex}`, false, false},
		{"nul", `{"a":nul}`, false, false},
		{"True", `{"a":True}`, false, false},
		{"comment", `{"a":1 /* c */}`, false, false},
		{"bom", "\xef\xbb\xbf{}", false, false},
		{"nbsp", "{\"a\":1\u00a0}", false, false},
		{"vertical tab", "{\v}", false, false},
		{"nul byte after", "{}\x00", false, false},
		{"colon twice", `{"a"::1}`, false, false},
		{"comma first", `{,"a":1}`, false, false},
		{"double comma", `{"a":1,,"b":2}`, false, false},
		{"array as object", `{"a":[1:2]}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, o := range ujsontest.Modes[1:] {
				got := ujsontest.CheckDecode(t, o, []byte(tc.in))
				m, err := ujsontest.Reference(o.Numbers, []byte(tc.in))
				if want := err == nil && m != nil && !tc.refOK; got != want {
					t.Errorf("%+v: ok=%v on %q, want %v (the reference: %v)", o, got, tc.in, want, err)
				}
			}
			got := ujsontest.CheckDecode(t, sigsOptions, []byte(tc.in))
			if tc.ok && !got {
				t.Errorf("declined %q, which sigsjson accepts", tc.in)
			}
			_, err := ujsontest.Reference(sigsOptions.Numbers, []byte(tc.in))
			if tc.ok && err != nil {
				t.Errorf("the reference rejects %q: %v (fix the table)", tc.in, err)
			}
			if !tc.ok && (err == nil) != tc.refOK {
				t.Errorf("the reference's error on %q is %v (fix the table)", tc.in, err)
			}
		})
	}
}

// TestDecodeUnstructuredTypes pins the Go types of the decoded numbers.
func TestDecodeUnstructuredTypes(t *testing.T) {
	m, ok := ujson.Decode([]byte(`{"i":-0,"big":9223372036854775808,"e":1e3,"f":1.0,"x":[1,2.5]}`), sigsOptions)
	if !ok {
		t.Fatal("declined")
	}
	want := map[string]any{"i": int64(0), "big": 9223372036854775808.0, "e": 1000.0, "f": 1.0, "x": []any{int64(1), 2.5}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v, want %#v", m, want)
	}
	if _, ok := m["i"].(int64); !ok {
		t.Fatalf("-0 is %T", m["i"])
	}
}

// TestDecodeUnstructuredNoAliasing: decoded strings do not change when the
// input does.
func TestDecodeUnstructuredNoAliasing(t *testing.T) {
	b := []byte(`{"key":"value","e":"a\nb"}`)
	m, ok := ujson.Decode(b, sigsOptions)
	if !ok {
		t.Fatal("declined")
	}
	for i := range b {
		b[i] = 'x'
	}
	if !reflect.DeepEqual(m, map[string]any{"key": "value", "e": "a\nb"}) {
		t.Fatalf("the decoded content aliases the input: %#v", m)
	}
}

type textKey string

// TestEncodeUnstructured: sigsOptions on the table (ok: accepted, as
// encoding/json encodes it), and with Options.Int: the same, and Go int
// values accepted too.
func TestEncodeUnstructured(t *testing.T) {
	intOnly := map[string]bool{"int": true, "nested foreign": true} // foreign only by a Go int
	deep := func(n int) map[string]any {
		m := map[string]any{"a": int64(1)}
		for range n {
			m = map[string]any{"a": m, "l": []any{}}
		}
		return m
	}
	var nilMap map[string]any
	var nilSlice []any
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	for _, tc := range []struct {
		name string
		in   map[string]any
		ok   bool
	}{
		{"nil", nil, true},
		{"empty", map[string]any{}, true},
		{"kinds", map[string]any{"s": "x", "i": int64(1), "f": 1.5, "t": true, "f2": false, "n": nil,
			"a": []any{int64(1), "x", nil, map[string]any{}}, "o": map[string]any{"p": map[string]any{"q": []any{}}}}, true},
		{"nil map and slice", map[string]any{"m": nilMap, "s": nilSlice, "l": []any{nilMap, nilSlice}}, true},
		{"sorted keys", map[string]any{"b": int64(1), "a": int64(2), "B": int64(3), "": int64(4), "aa": int64(5), "é": int64(6), "~": int64(7), "a\x00": int64(8)}, true},
		{"many keys", func() map[string]any {
			m := map[string]any{}
			for i := range 100 {
				m[fmt.Sprint(i*7919%1000)] = int64(i)
			}
			return m
		}(), true},
		{"escapes", map[string]any{"a": "\"\\/\b\f\n\r\t", "\"k\\<>&": "v", "c": "\x00\x01\x1f\x7f"}, true},
		{"html", map[string]any{"a": "<script>&amp;</script>", "<": ">"}, true},
		{"unicode", map[string]any{"a": "é日本語😀", "b": "\u2028\u2029\u2027\u202a", "c": "\ufffd\uffff"}, true},
		{"invalid utf8", map[string]any{"a": "\xff", "b": "x\xc3", "c": "\xed\xa0\x80", "\xfe": "k", "d": "\xf0\x9f\x98", "e": "\xc3\xa9\xc3"}, true},
		{"ints", map[string]any{"a": int64(0), "b": int64(-1), "c": int64(math.MaxInt64), "d": int64(math.MinInt64), "e": int64(1 << 53)}, true},
		{"floats", map[string]any{"a": 0.0, "b": math.Copysign(0, -1), "c": 1.0, "d": -1.0, "e": 1.5, "f": 0.1,
			"g": 1e20, "h": 1e21, "i": -1e21, "j": 123456789e13, "k": 1e-6, "l": 1e-7, "m": -1e-7, "n": 9.99999e-7,
			"o": 5e-324, "p": math.MaxFloat64, "q": 1e100, "r": 1.5e-10, "s": 1e-100, "t": 100.0, "u": 1e15, "v": 0.000001234,
			"w": float64(1 << 62), "x": 2.5e-300, "y": 1.7976931348623157e308, "z": 123.456}, true},
		{"deep", deep(500), true},
		{"too deep for us", deep(1200), false},
		{"cycle", cyclic, false},
		{"NaN", map[string]any{"a": math.NaN()}, false},
		{"Inf", map[string]any{"a": math.Inf(1)}, false},
		{"-Inf", map[string]any{"a": []any{math.Inf(-1)}}, false},
		{"int", map[string]any{"a": 1}, false},
		{"int32", map[string]any{"a": int32(1)}, false},
		{"uint64", map[string]any{"a": uint64(1)}, false},
		{"float32", map[string]any{"a": float32(1.5)}, false},
		{"json.Number", map[string]any{"a": json.Number("1")}, false},
		{"RawMessage", map[string]any{"a": json.RawMessage(`1`)}, false},
		{"map[string]string", map[string]any{"a": map[string]string{"b": "c"}}, false},
		{"[]string", map[string]any{"a": []string{"b"}}, false},
		{"[]map", map[string]any{"a": []map[string]any{{}}}, false},
		{"named string", map[string]any{"a": textKey("x")}, false},
		{"pointer", map[string]any{"a": new(int64)}, false},
		{"nested foreign", map[string]any{"a": []any{map[string]any{"b": 1}}}, false},
		{"struct", map[string]any{"a": struct{ X int }{1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ujsontest.CheckEncode(t, sigsOptions, tc.in)
			if got != tc.ok {
				t.Errorf("ok=%v, want %v", got, tc.ok)
			}
			if got := ujsontest.CheckEncode(t, ujson.Options{Int: true}, tc.in); got != (tc.ok || intOnly[tc.name]) {
				t.Errorf("Int: ok=%v, want %v", got, !got)
			}
		})
	}
}

// TestEncodeFloatsExhaustive compares the float formatting on the decades
// around the exponent switches and on random bit patterns.
func TestEncodeFloatsExhaustive(t *testing.T) {
	var fs []float64
	for e := -330; e <= 310; e++ {
		for _, m := range []float64{1, 1.5, 9.999999, 2.2250738585072014} {
			fs = append(fs, m*math.Pow(10, float64(e)))
		}
	}
	for _, f := range []float64{1e-6, 1e21} {
		fs = append(fs, f, math.Nextafter(f, 0), math.Nextafter(f, math.Inf(1)))
	}
	x := uint64(0x9e3779b97f4a7c15)
	for range 20000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		fs = append(fs, math.Float64frombits(x))
	}
	for _, f := range fs {
		m := map[string]any{"f": f, "n": -f}
		ok := ujsontest.CheckEncode(t, sigsOptions, m)
		if ok == (math.IsNaN(f) || math.IsInf(f, 0)) {
			t.Fatalf("%v: ok=%v", f, ok)
		}
	}
}

// FuzzDecodeUnstructured: in each mode, whatever Decode accepts, the
// reference decodes to the same value, and Decode accepts what the reference
// accepts (short inputs).
func FuzzDecodeUnstructured(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"a":-0,"b":1.5e3,"c":1e400,"d":9223372036854775808}`,
		`{"a":"\ud83d\ude00\ud83d\u0041\ude00\u00e9\n\"\\\/"}`, "{\"a\":\"\xff\xc3\"}",
		`{"a":[1,{"b":null,"c":[true,false]}],"a":{}}`, ` {"a" : [ ] } `, `{"a":01}`, `{"a":1,}`,
		`{"metadata":{"name":"x","labels":{"app":"web"}},"spec":{"replicas":3}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ujsontest.CheckDecodeComplete(t, b)
	})
}

// text writes JSON text made from fuzz bytes: mostly valid, with the
// escapes, spaces, numbers and duplicate keys decoding must get right, and
// now and then a stray byte.
func (f *ujsonFuzzValue) text(b []byte, depth int) []byte {
	b = f.space(b)
	k := f.byte() % 16
	if depth <= 0 && k < 4 {
		k += 4
	}
	switch k {
	case 0, 1:
		b = append(b, '{')
		for i := range int(f.byte() % 5) {
			if i > 0 {
				b = append(f.space(b), ',')
			}
			b = f.space(b)
			if f.byte()%3 == 0 {
				b = append(b, `"a"`...) // duplicates
			} else {
				b = f.strText(b)
			}
			b = append(f.space(b), ':')
			b = f.text(b, depth-1)
		}
		b = append(f.space(b), '}')
	case 2, 3:
		b = append(b, '[')
		for i := range int(f.byte() % 5) {
			if i > 0 {
				b = append(f.space(b), ',')
			}
			b = f.text(b, depth-1)
		}
		b = append(f.space(b), ']')
	case 4, 5, 6:
		b = f.strText(b)
	case 7, 8, 9:
		b = f.numText(b)
	case 10:
		b = append(b, "true"...)
	case 11:
		b = append(b, "false"...)
	case 12:
		b = append(b, "null"...)
	case 13:
		b = append(b, f.byte()) // most likely invalid
	default:
		b = f.numText(b)
	}
	return f.space(b)
}

func (f *ujsonFuzzValue) space(b []byte) []byte {
	for range f.byte() % 4 {
		switch f.byte() % 5 {
		case 0:
			b = append(b, ' ')
		case 1:
			b = append(b, '\t')
		case 2:
			b = append(b, '\n')
		case 3:
			b = append(b, '\r')
		}
	}
	return b
}

var ujsonFuzzEscapes = []string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ude00`, `\u2028`, `\u0000`, `\uFFFF`, `\x`, `\u12`}

func (f *ujsonFuzzValue) strText(b []byte) []byte {
	b = append(b, '"')
	for range f.byte() % 10 {
		switch c := f.byte(); c % 6 {
		case 0:
			b = append(b, ujsonFuzzEscapes[int(f.byte())%len(ujsonFuzzEscapes)]...)
		case 1:
			b = append(b, `\u`...)
			b = append(b, "0123456789abcdef"[f.byte()%16], "dD0Aa"[f.byte()%5], "0123456789abcdef"[f.byte()%16], "0fF9c"[f.byte()%5])
		case 2:
			b = append(b, f.byte()) // raw, maybe invalid UTF-8 or a control
		case 3:
			b = append(b, "é日😀\u2028"[f.byte()%4:]...)
		default:
			b = append(b, 'a'+c%26)
		}
	}
	return append(b, '"')
}

func (f *ujsonFuzzValue) numText(b []byte) []byte {
	if f.byte()%2 == 0 {
		b = append(b, '-')
	}
	n := int(f.byte() % 24)
	if n == 0 {
		b = append(b, '0')
	}
	for i := range n {
		d := f.byte() % 10
		if i == 0 && d == 0 {
			d = 1
		}
		b = append(b, '0'+d)
	}
	if c := f.byte(); c%3 == 0 {
		b = append(b, '.')
		for range 1 + int(f.byte()%20) {
			b = append(b, '0'+f.byte()%10)
		}
	}
	if c := f.byte(); c%3 == 0 {
		b = append(b, "eE"[c%2])
		b = append(b, []string{"", "+", "-"}[f.byte()%3]...)
		for range 1 + int(f.byte()%4) {
			b = append(b, '0'+f.byte()%10)
		}
	}
	return b
}

// FuzzDecodeUnstructuredText is FuzzDecodeUnstructured on JSON text
// generated from the fuzz bytes (mostly valid, unlike arbitrary bytes).
func FuzzDecodeUnstructuredText(f *testing.F) {
	for _, s := range []string{"", "\x00\x04\x00\x01\x05\x07\x02", "\x00\x00\x04\x03\x01\x07\x10\x05\x01\x03\x04\x00\x01\x02\x05\x05\x09"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &ujsonFuzzValue{fuzzSource{b: in}}
		b := g.space(nil)
		b = append(b, '{')
		for i := 0; len(g.b) > 0 && i < 8; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = g.strText(b)
			b = append(b, ':')
			b = g.text(b, 5)
		}
		b = append(b, '}')
		b = g.space(b)
		ujsontest.CheckDecodeComplete(t, b)
	})
}

// ujsonFuzzValue builds unstructured content (and, now and then, a value
// of a foreign type) from fuzz bytes.
type ujsonFuzzValue struct {
	fuzzSource
}

func (f *ujsonFuzzValue) u64() uint64 {
	var buf [8]byte
	copy(buf[:], f.bytes(8))
	return binary.LittleEndian.Uint64(buf[:])
}

func (f *ujsonFuzzValue) str() string { return string(f.bytes(int(f.byte() % 12))) }

var ujsonFuzzStrings = []string{"", "a", "<&>", "\u2028", "é", "\xff", "\"\\", "\x00\x1f\x7f", "1e21", "metadata"}

var ujsonFuzzFloats = []float64{0, 1, -1, 0.1, 1e-6, 1e-7, 1e20, 1e21, 5e-324, math.MaxFloat64, 123.456, 1e300}

func (f *ujsonFuzzValue) value(depth int) any {
	k := f.byte() % 16
	if depth <= 0 && k < 4 {
		k += 4
	}
	switch k {
	case 0, 1:
		m := map[string]any{}
		for range f.byte() % 6 {
			m[f.key()] = f.value(depth - 1)
		}
		return m
	case 2, 3:
		l := make([]any, f.byte()%5)
		for i := range l {
			l[i] = f.value(depth - 1)
		}
		return l
	case 4:
		return f.str()
	case 5:
		return ujsonFuzzStrings[int(f.byte())%len(ujsonFuzzStrings)]
	case 6:
		return int64(f.u64())
	case 7:
		return int64(int8(f.byte()))
	case 8:
		return math.Float64frombits(f.u64())
	case 9:
		return ujsonFuzzFloats[int(f.byte())%len(ujsonFuzzFloats)] * float64(int8(f.byte()))
	case 10:
		return f.byte()%2 == 1
	case 11:
		return nil
	case 12:
		switch f.byte() % 4 {
		case 0:
			return map[string]any(nil)
		case 1:
			return []any(nil)
		}
		return nil
	default:
		if f.byte()%8 != 0 {
			return f.str()
		}
		// A foreign type: declined.
		switch f.byte() % 6 {
		case 0:
			return int(f.byte())
		case 1:
			return int32(f.byte())
		case 2:
			return float32(f.byte())
		case 3:
			return map[string]string{"a": f.str()}
		case 4:
			return json.Number("1")
		default:
			return []string{f.str()}
		}
	}
}

func (f *ujsonFuzzValue) key() string {
	if f.byte()%2 == 0 {
		return ujsonFuzzStrings[int(f.byte())%len(ujsonFuzzStrings)]
	}
	return f.str()
}

// FuzzEncodeUnstructured: with and without Options.Int, whatever Encode
// accepts, encoding/json encodes to the same bytes, and the encoding decodes
// as the reference decodes it in each mode.
func FuzzEncodeUnstructured(f *testing.F) {
	for _, s := range []string{
		"", "\x00\x03\x04abc\x06\x01\x02\x03\x04\x05\x06\x07\x08",
		"\x00\x05\x01\x08\x00\x00\x00\x00\x00\x00\xf8\x7f\x01\x04\x05\xff\xfe<>",
		"\x02\x04\x09\x03\x05\x0a\x0b\x0c\x0d",
		"\x00\x03\x00\x05\x0d\x07\x01\x02\x00\x06\x0d\x00\x03",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &ujsonFuzzValue{fuzzSource{b: b}}
		m := map[string]any{}
		for len(g.b) > 0 && len(m) < 8 {
			m[g.key()] = g.value(4)
		}
		for _, eo := range []ujson.Options{sigsOptions, {Int: true}} {
			if !ujsontest.CheckEncode(t, eo, m) {
				continue
			}
			// What was encoded decodes as the reference decodes it.
			enc, _ := ujson.Encode(m, eo)
			for _, o := range ujsontest.Modes {
				if !ujsontest.CheckDecode(t, o, enc) {
					t.Fatalf("%+v: declined an encoding: %s", o, enc)
				}
			}
		}
	})
}

// ujsonPod is the encoding of the typed Pod of testdata/ujson/pod.yaml
// fuzzSource hands a fuzz input's bytes to the generators, one at a time
// and 0 once the input is exhausted: the committed corpora decode to the
// inputs they were found as. (engine's fuzz targets have their own: test
// files are not shared across packages.)
type fuzzSource struct {
	b []byte
}

func (f *fuzzSource) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// bytes takes the next n bytes, fewer when the input ends.
func (f *fuzzSource) bytes(n int) []byte {
	n = min(n, len(f.b))
	s := f.b[:n]
	f.b = f.b[n:]
	return s
}

// TestNumbers pins the rules on which the modes differ: a number out of
// float64's range, and the Go types of numbers.
func TestNumbers(t *testing.T) {
	in := []byte(`{"big":1e400,"small":-1e309,"z":-0,"i":7,"f":1.5,"u":1e-400}`)
	if m, ok := ujson.Decode(in, ujson.Options{Numbers: ujson.IntOrFloat}); ok {
		t.Errorf("IntOrFloat accepted a number out of range: %v", m)
	}
	if m, ok := ujson.Decode(in, ujson.Options{Numbers: ujson.Float}); ok {
		t.Errorf("Float accepted a number out of range: %v", m)
	}
	m, ok := ujson.Decode(in, ujson.Options{Numbers: ujson.IntOrFloatInf})
	want := map[string]any{"big": math.Inf(1), "small": math.Inf(-1), "z": int64(0), "i": int64(7), "f": 1.5, "u": 0.0}
	if !ok || !reflect.DeepEqual(m, want) {
		t.Errorf("IntOrFloatInf: %#v (ok %v), want %#v", m, ok, want)
	}
	m, ok = ujson.Decode([]byte(`{"z":-0,"i":7,"f":1.5,"l":[123456789012345,1234567890123456789]}`), ujson.Options{Numbers: ujson.Float})
	if !ok || fmt.Sprintf("%#v", m) != fmt.Sprintf("%#v", map[string]any{"z": math.Copysign(0, -1), "i": 7.0, "f": 1.5, "l": []any{123456789012345.0, 1234567890123456789.0}}) {
		t.Errorf("Float: %#v (ok %v)", m, ok)
	}
	if b, ok := ujson.Encode(map[string]any{"i": 1}, ujson.Options{}); ok {
		t.Errorf("encoded a Go int without Options.Int: %s", b)
	}
	if b, ok := ujson.Encode(map[string]any{"i": -1}, ujson.Options{Int: true}); !ok || string(b) != `{"i":-1}` {
		t.Errorf("Options.Int: %s (ok %v)", b, ok)
	}
}
