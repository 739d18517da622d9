package admission

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		want     string // expected patch; "" means no patch
	}{
		{"equal", `{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`, ""},
		{"add key", `{"a":1}`, `{"a":1,"b":2}`, `[{"op":"add","path":"/b","value":2}]`},
		{"remove key", `{"a":1,"b":2}`, `{"a":1}`, `[{"op":"remove","path":"/b"}]`},
		{"replace scalar", `{"a":1}`, `{"a":"x"}`, `[{"op":"replace","path":"/a","value":"x"}]`},
		{"sorted keys", `{}`, `{"z":1,"a":2}`, `[{"op":"add","path":"/a","value":2},{"op":"add","path":"/z","value":1}]`},
		{"escaped key", `{"metadata":{"labels":{}}}`, `{"metadata":{"labels":{"k8s.io/x~y":"v"}}}`,
			`[{"op":"add","path":"/metadata/labels/k8s.io~1x~0y","value":"v"}]`},
		{"append to list", `{"l":[1,2]}`, `{"l":[1,2,3]}`, `[{"op":"add","path":"/l/2","value":3}]`},
		{"prepend to list", `{"l":[1,2]}`, `{"l":[0,1,2]}`, `[{"op":"add","path":"/l/0","value":0}]`},
		{"remove from middle", `{"l":[1,2,3]}`, `{"l":[1,3]}`, `[{"op":"remove","path":"/l/1"}]`},
		{"nested in list", `{"c":[{"n":"a","x":1}]}`, `{"c":[{"n":"a","x":2}]}`, `[{"op":"replace","path":"/c/0/x","value":2}]`},
		{"null value kept", `{"a":1}`, `{"a":null}`, `[{"op":"replace","path":"/a","value":null}]`},
		{"object to list", `{"a":{}}`, `{"a":[]}`, `[{"op":"replace","path":"/a","value":[]}]`},
		{"big numbers exact", `{"n":1}`, `{"n":12345678901234567890}`, `[{"op":"replace","path":"/n","value":12345678901234567890}]`},
		{"absent original", ``, `{"a":1}`, `[{"op":"add","path":"","value":{"a":1}}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Diff([]byte(tt.from), []byte(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("Diff:\n got %s\nwant %s", got, tt.want)
			}
			if tt.want != "" && tt.from != "" {
				assertApplies(t, tt.from, tt.to, got)
			}
		})
	}
}

func TestDiffBadJSON(t *testing.T) {
	if _, err := Diff([]byte(`{"a":1}`), []byte(`{"a":`)); err == nil {
		t.Fatal("want an error for a modified document that is not JSON")
	}
}

func TestDiffDeterministic(t *testing.T) {
	from := []byte(`{"a":{"x":1,"y":2,"z":3},"b":[1,2,3]}`)
	to := []byte(`{"a":{"x":9,"y":8,"w":7},"b":[3,2,1],"c":true}`)
	first, _ := Diff(from, to)
	for i := 0; i < 50; i++ {
		again, _ := Diff(from, to)
		if !bytes.Equal(first, again) {
			t.Fatalf("run %d differs:\n%s\n%s", i, first, again)
		}
	}
	assertApplies(t, string(from), string(to), first)
}

func assertApplies(t *testing.T, from, to string, patch []byte) {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch does not decode: %v\n%s", err, patch)
	}
	out, err := p.Apply([]byte(from))
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, patch)
	}
	if !jsonpatch.Equal(out, []byte(to)) {
		t.Fatalf("patched document differs:\n got %s\nwant %s\npatch %s", out, to, patch)
	}
}

func FuzzDiff(f *testing.F) {
	f.Add(`{"a":1,"l":[1,{"x":2}]}`, `{"a":2,"l":[{"x":3},1,4]}`)
	f.Add(`{"spec":{"containers":[{"name":"a"}]}}`, `{"spec":{"containers":[{"name":"b"},{"name":"a"}]}}`)
	f.Add(`[]`, `{}`)
	f.Fuzz(func(t *testing.T, from, to string) {
		// Go's decoder replaces invalid UTF-8 in keys; admission objects are valid UTF-8.
		if !utf8.ValidString(from) || !utf8.ValidString(to) {
			return
		}
		var a, b any
		if json.Unmarshal([]byte(from), &a) != nil || json.Unmarshal([]byte(to), &b) != nil {
			return
		}
		if _, ok := a.(map[string]any); !ok {
			return
		}
		if _, ok := b.(map[string]any); !ok {
			return
		}
		patch, err := Diff([]byte(from), []byte(to))
		if err != nil {
			t.Fatalf("Diff(%s, %s): %v", from, to, err)
		}
		if patch == nil {
			if !jsonpatch.Equal([]byte(from), []byte(to)) {
				t.Fatalf("no patch for different documents %s %s", from, to)
			}
			return
		}
		assertApplies(t, from, to, patch)
	})
}
