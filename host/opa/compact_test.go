package opa

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendCompact: appendCompact agrees with encoding/json.Compact on
// valid JSON.
func FuzzAppendCompact(f *testing.F) {
	for _, s := range []string{"{\n  \"a\": [1, 2],\n  \"b\": \"x \\\" \\n y\"\n}", `{"a":1}`, "[\n\"\\\\\", \" \"\n]", "\n\"\u00e9 \\u0041\"\t"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		got := appendCompact(nil, b)
		if bytes.IndexByte(b, '\n') < 0 {
			if !bytes.Equal(got, b) {
				t.Fatalf("%q: changed a document without newlines", b)
			}
			return
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%q: got %q, want %q", b, got, want.Bytes())
		}
	})
}
