package jsonv

import "testing"

// FuzzSameTyped: SameTyped on two typed encodings says what comparing the
// values' semantic encodings says.
func FuzzSameTyped(f *testing.F) {
	for _, p := range [][2]string{
		{`1`, `1.0`}, {`{"a":1,"b":[1,2.5]}`, `{"b":[1.0,2.5],"a":1e0}`}, {`[1,2]`, `[2,1]`},
		{`{"i1":"f1,]}"}`, `{"i1":"f1,]}"}`}, {`"a\"b,1"`, `"a\"b,2"`}, {`null`, `[]`}, {`{"a":null}`, `{"a":[]}`},
		{`9007199254740993`, `9007199254740992`}, {`-0.0`, `0`}, {`{"x":{"y":[true,false,null]}}`, `{"x":{"y":[true,false,null]}}`},
		{`[1,"1"]`, `[1,1]`}, {`{"a":1}`, `{"a":1,"b":2}`}, {`1e400`, `1`},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		va, err := Parse([]byte(a), IntsPreserved)
		if err != nil {
			return
		}
		vb, err := Parse([]byte(b), IntsPreserved)
		if err != nil {
			return
		}
		want := string(AppendSemantic(nil, va)) == string(AppendSemantic(nil, vb))
		if got := SameTyped(AppendTyped(nil, va), AppendTyped(nil, vb)); got != want {
			t.Fatalf("SameTyped(%s, %s) = %v, semantic encodings equal: %v", a, b, got, want)
		}
		// A nil array (encoded N) is null for SameJSON.
		na := &Value{K: Array, NilArray: true}
		if !SameTyped(AppendTyped(nil, na), AppendTyped(nil, &Value{K: Null})) {
			t.Fatal("nil array and null differ")
		}
	})
}
