//go:build !wasip1

package policytest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseYAML(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		want    string // JSON
		wantTag string
		wantErr string
	}{
		{name: "mapping", src: "a: 1\nb: x\nc: null\nd: true\ne: ''\n", want: `{"a":1,"b":"x","c":null,"d":true,"e":""}`},
		{name: "sequence at its key's indentation (serde_yaml)", src: "field_masks:\n- a.b\n- c\nx: 1", want: `{"field_masks":["a.b","c"],"x":1}`},
		{name: "indented sequence (yaml.v3)", src: "m:\n  - a\n  - b\n", want: `{"m":["a","b"]}`},
		{name: "sequence of mappings", src: "- type: Exchange\n  request: x\n  response:\n    type: Success\n    payload: '{\"a\":1}'\n- type: Exchange\n  request: y\n", want: `[{"request":"x","response":{"payload":"{\"a\":1}","type":"Success"},"type":"Exchange"},{"request":"y","type":"Exchange"}]`},
		{name: "literal block", src: "request: |\n  !KubernetesGetResource\n  api_version: v1\nnext: 1\n", want: `{"next":1,"request":"!KubernetesGetResource\napi_version: v1\n"}`},
		{name: "literal block strip", src: "r: |-\n  a\n\n  b\n\n", want: `{"r":"a\n\nb"}`},
		{name: "folded block", src: "r: >\n  a\n  b\n\n  c\n", want: `{"r":"a b\nc\n"}`},
		{name: "single quotes folded over lines", src: "payload: '{\"a\":\n  \"b c\"}'\nx: 'it''s'\n", want: `{"payload":"{\"a\": \"b c\"}","x":"it's"}`},
		{name: "double quotes with escapes", src: `m: "a\"b\\c\n\u00e9"`, want: `{"m":"a\"b\\c\né"}`},
		{name: "flow mapping", src: "ra: {group: '', name: null, verb: create, n: [1, 2]}\n", want: `{"ra":{"group":"","n":[1,2],"name":null,"verb":"create"}}`},
		{name: "tagged document", src: "!KubernetesCanI\nrequest:\n  user: u\ndisable_cache: false\n", want: `{"disable_cache":false,"request":{"user":"u"}}`, wantTag: "KubernetesCanI"},
		{name: "tag with a flow body", src: "!DNSLookupHost {host: example.com}", want: `{"host":"example.com"}`, wantTag: "DNSLookupHost"},
		{name: "document marker and comments", src: "---\n# c\na: b # c\n", want: `{"a":"b"}`},
		{name: "plain string with colon", src: "d: sha256:abc\n", want: `{"d":"sha256:abc"}`},
		{name: "numbers stay numbers", src: "data: [45, 0, 255]\n", want: `{"data":[45,0,255]}`},
		{name: "bad indentation", src: "a: 1\n   b: 2\n", wantErr: "line 2"},
		{name: "unterminated quote", src: "a: 'x\n", wantErr: "unterminated"},
		{name: "duplicate key", src: "a: 1\na: 2\n", wantErr: `duplicate key "a"`},
		{name: "alias", src: "a: *x\n", wantErr: "aliases"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, tag, err := parseYAML(tt.src)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, want) || tag != tt.wantTag {
				got, _ := json.Marshal(v)
				t.Fatalf("got %s tag %q, want %s tag %q", got, tag, tt.want, tt.wantTag)
			}
		})
	}
}

func FuzzParseYAML(f *testing.F) {
	for _, s := range []string{"a: 1\n", "- a\n- b: c\n", "r: |\n  x\n", "'a\n b'", "{a: [1, 'x']}", "!T\na: b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		parseYAML(src) // must not panic
	})
}
