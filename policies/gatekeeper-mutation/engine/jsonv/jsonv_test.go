package jsonv

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParse: Parse accepts what encoding/json accepts, and Encode of the
// tree decodes (with encoding/json) to what the input decodes to; repeated
// keys keep the last value, as encoding/json does.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[1,2.5,"x",true,null,{}],"c":{"d":"e\u00e9\n"}}`, `{"a":1,"a":2,"b":3,"a":4}`, `[]`, `[[],[{}]]`,
		`{"k":{"k":{"k":[1,{"k":2,"k":3}]}}}`, `"\ud83d\ude00"`, `-0.5e-3`, `123456789012345678901234567890`, `{"":""}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want any
		wantErr := json.Unmarshal([]byte(s), &want)
		v, err := Parse([]byte(s), IntsPreserved)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Parse(%q): %v; encoding/json: %v", s, err, wantErr)
		}
		if err != nil {
			return
		}
		var got any
		if err := json.Unmarshal(Encode(nil, v), &got); err != nil {
			t.Fatalf("Encode(%q) = %s: %v", s, Encode(nil, v), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Parse(%q) encodes to %s", s, Encode(nil, v))
		}
	})
}

// FuzzRawFieldsParsed: RawFieldsParsed gives RawFields' fields, and the
// parsed value is Parse of the key's raw value.
func FuzzRawFieldsParsed(f *testing.F) {
	for _, s := range []string{`{"kind":"x","object":{"a":[1,2,{"b":"c"}]},"z":1}`, `{"object":1,"object":{"x":2}}`, `{}`, `{"a":{"object":3}}`, `{"object":[1,]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, wantErr := RawFields([]byte(s))
		got, parsed, err := RawFieldsParsed([]byte(s), "object", IntsPreserved)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: %v, RawFields: %v", s, err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fields %q, RawFields %q", s, got, want)
		}
		raw, ok := want["object"]
		if !ok {
			if parsed != nil {
				t.Fatalf("%q: parsed without an object", s)
			}
			return
		}
		v, err := Parse(raw, IntsPreserved)
		if err != nil || parsed == nil || string(Encode(nil, v)) != string(Encode(nil, parsed)) {
			t.Fatalf("%q: parsed %s, Parse %s %v", s, Encode(nil, parsed), Encode(nil, v), err)
		}
	})
}

// FuzzRawFieldsNested: RawFieldsNested reads what RawFields and then
// RawFieldsParsed of the nested object read.
func FuzzRawFieldsNested(f *testing.F) {
	for _, s := range []string{`{"request":{"kind":"x","object":{"a":[1]}},"settings":{"m":[]}}`, `{"settings":{},"request":{"object":null}}`, `{"request":1}`, `{"request":{"object":{"x":1}},"request":{"kind":2}}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		top, nested, parsed, err := RawFieldsNested([]byte(s), "request", "object", IntsPreserved)
		wantTop, wantErr := RawFields([]byte(s))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: %v, RawFields: %v", s, err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(top.Map(), wantTop) {
			t.Fatalf("%q: fields %q, want %q", s, top, wantTop)
		}
		raw, ok := wantTop["request"]
		if !ok || len(raw) == 0 || raw[0] != '{' {
			if nested != nil || parsed != nil {
				t.Fatalf("%q: nested fields for a request that is not an object", s)
			}
			return
		}
		wantNested, wantParsed, err := RawFieldsParsed(raw, "object", IntsPreserved)
		// parsed is read lazily: compared as values (AppendTyped reads it).
		if err != nil || !reflect.DeepEqual(nested.Map(), wantNested) || string(AppendTyped(nil, parsed)) != string(AppendTyped(nil, wantParsed)) {
			t.Fatalf("%q: nested %q %s, want %q %s (%v)", s, nested, AppendTyped(nil, parsed), wantNested, AppendTyped(nil, wantParsed), err)
		}
	})
}
