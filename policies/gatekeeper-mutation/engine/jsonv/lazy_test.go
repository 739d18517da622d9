package jsonv

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// FuzzParseLazy: ParseLazy accepts and refuses what Parse does, with the
// same error; read whole it is the same value (AppendTyped); left unread,
// Encode copies the bytes of what was not read and still decodes (with
// encoding/json) to what the input decodes to. One Reader serves every
// document, as the guest's does.
func FuzzParseLazy(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[1,2.5,"x",true,null,{}],"c":{"d":"e\u00e9\n"}}`, `{"a":{"x":1},"a":{"y":2},"b":3}`, `[]`, `[[],[{}]]`,
		`{"k":{"k":{"k":[1,{"k":2,"k":3}]}}}`, `"\ud83d\ude00"`, `-0.5e-3`, `123456789012345678901234567890`, `{"":""}`,
		`{"a" : [ {"b" : 1e400} ] }`, `{"a":{"b":"\x"}}`, `{"a":{"b":"` + "\x01" + `"}}`, "{\"a\":{\"b\":\"\xff\"}}", `{"a":{"b":[1,]}}`,
		`{"a":[[[1e-400]]]}`, ` { "a" : { } , "b" : [ ] } `, `{"a":{"b":1}} x`, `{"a":{"b":"\u12"}}`,
	} {
		f.Add(s)
	}
	var r Reader
	f.Fuzz(func(t *testing.T, s string) {
		want, wantErr := Parse([]byte(s), IntsPreserved)
		got, err := r.Parse([]byte(s), IntsPreserved)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("ParseLazy(%q): %v; Parse: %v", s, err, wantErr)
		}
		if err != nil {
			return
		}
		var decoded any
		if err := json.Unmarshal([]byte(s), &decoded); err != nil {
			t.Fatalf("Parse accepts %q, encoding/json does not: %v", s, err)
		}
		var fromRaw any
		if err := json.Unmarshal(Encode(nil, got), &fromRaw); err != nil || !reflect.DeepEqual(fromRaw, decoded) {
			t.Fatalf("ParseLazy(%q), unread, encodes to %s (%v)", s, Encode(nil, got), err)
		}
		if g, w := AppendTyped(nil, got), AppendTyped(nil, want); string(g) != string(w) {
			t.Fatalf("ParseLazy(%q) reads as %s, Parse as %s", s, g, w)
		}
		LoadAll(got)
		if g, w := Encode(nil, got), Encode(nil, want); string(g) != string(w) {
			t.Fatalf("ParseLazy(%q) read whole encodes to %s, Parse's to %s", s, g, w)
		}
	})
}

// TestLazyRoundedNumbers: an object holding a number whose float64 is not
// its decimal value is read whole, so that its encoding holds the number
// as the engine holds it (as Gatekeeper re-encodes it), not its bytes.
func TestLazyRoundedNumbers(t *testing.T) {
	for _, s := range []string{
		`{"a":{"n":12345678901234567890}}`, `{"a":[{"n":-0.1000000000000000055511151231257827}]}`,
		`{"a":{"n":1.00000000000000000001e3}}`,
	} {
		want, err := Parse([]byte(s), IntsPreserved)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseLazy([]byte(s), IntsPreserved)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := Encode(nil, got), Encode(nil, want); string(g) != string(w) {
			t.Errorf("%s: encodes to %s, Parse's tree to %s", s, g, w)
		}
	}
	// Integers of 18 digits and short floats are exact: read lazily.
	got, err := ParseLazy([]byte(`{"a":{"n":-123456789012345678,"f":0.25}}`), IntsPreserved)
	if err != nil || got.O.Vals[0].K != Raw {
		t.Fatalf("read whole: %v", err)
	}
}

// TestLazyReadsWhatItTouches: on the 5 KB Pod, reading one container's
// image leaves the rest unread, and Encode copies its bytes.
func TestLazyReadsWhatItTouches(t *testing.T) {
	data, err := os.ReadFile("../../../../test/testdata/reviews/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	_, req, obj, err := RawFieldsNested(data, "request", "object", IntsPreserved)
	if err != nil {
		t.Fatal(err)
	}
	if obj.K != Object {
		t.Fatalf("the top value is read: kind %v", obj.K)
	}
	for i, k := range obj.O.Keys {
		if v := obj.O.Vals[i]; v.K == Object || v.K == Array {
			t.Fatalf("%s was read before anything asked for it", k)
		}
	}
	cs := obj.Field("spec").Field("containers")
	if cs == nil || cs.K != Array || len(cs.A) == 0 || cs.A[0].K != Object {
		t.Fatalf("spec.containers: %v", cs)
	}
	if img, ok := cs.A[0].Field("image").Str(); !ok || img == "" {
		t.Fatal("no image")
	}
	for i, k := range obj.O.Keys {
		if k == "metadata" && obj.O.Vals[i].K != Raw {
			t.Fatalf("metadata was read: %v", obj.O.Vals[i].K)
		}
	}
	// The encoding holds metadata's bytes as they were.
	raw := string(req.Get("object"))
	enc := string(Encode(nil, obj))
	md := obj.O.Vals[indexOf(obj.O.Keys, "metadata")]
	if !contains(enc, string(md.raw())) || !contains(raw, string(md.raw())) {
		t.Fatalf("metadata's bytes not copied")
	}
	var a, b any
	if json.Unmarshal([]byte(enc), &a) != nil || json.Unmarshal([]byte(raw), &b) != nil || !reflect.DeepEqual(a, b) {
		t.Fatal("the encoding is not the object")
	}
}

func indexOf(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return -1
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
