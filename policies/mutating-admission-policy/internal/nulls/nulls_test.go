package nulls

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var pruneSeeds = [][2]string{
	// result, original
	{`{"metadata":{"name":"p","creationTimestamp":null},"spec":{"a":null}}`, `{"metadata":{"name":"p"},"spec":{"a":1}}`},
	{`{"metadata":{"name":"p","creationTimestamp":null}}`, `{"metadata":{"name":"p","creationTimestamp":null}}`},
	{`{"metadata":{"name":"p"}}`, `{"metadata":{"name":"p","creationTimestamp":null,"x":null},"status":null}`},
	{`{"a":[{"b":null,"c":{"d":null}},null,[null,{"e":null}]]}`, `{"a":[{"b":2},{"c":null},[1,{"e":null,"f":null}]]}`},
	{`{"a":{"b":null}}`, `{"a":[{"b":null}]}`},
	{`{"a":{"b":null}}`, `{"a":null}`},
	{` { "a" : null , "b" : "x\"null\\" , "c" : [ 1 , 2.5e-3 , true , false ] } `, ` { "a" : null , "z" : null } `},
	{`{"a":"\u00e9null","b":nullx}`, `{"a":1}`},
	{`{"a\u0062":null}`, `{"ab":1}`},
	{`{"a":null,"a":1}`, `{}`},
	{`{"a":1}`, `{"a":null,"a":1}`},
	{`[]`, `{}`},
	{`null`, `null`},
	{`{}`, `{"k":null}`},
	{`{"a":{}}`, `{"a":{"n":null}}`},
}

func TestPruneNullsBytes(t *testing.T) {
	for _, s := range pruneSeeds {
		checkPrune(t, []byte(s[0]), []byte(s[1]))
	}
	// The common case takes the byte path.
	for _, s := range pruneSeeds[:7] {
		if _, err := pruneBytes([]byte(s[0]), []byte(s[1])); err != nil {
			t.Errorf("%s / %s: byte path refused: %v", s[0], s[1], err)
		}
	}
}

// checkPrune: where the byte path answers, it answers what the decoding
// path answers (as JSON values). The original is valid JSON (Evaluate has
// decoded it); the result is an encoding of json.Marshal.
func checkPrune(t *testing.T, result, original []byte) {
	t.Helper()
	if !json.Valid(result) || !json.Valid(original) {
		return
	}
	want, err := pruneDecoded(result, original)
	if err != nil {
		return // not something json.Marshal writes (1E700)
	}
	got, err := Prune(result, original)
	if err != nil {
		t.Fatalf("%s / %s: %v", result, original, err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s / %s: invalid output %s: %v", result, original, got, err)
	}
	_ = json.Unmarshal(want, &w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s / %s:\n got %s\nwant %s", result, original, got, want)
	}
}

func FuzzPruneNulls(f *testing.F) {
	for _, s := range pruneSeeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, result, original []byte) {
		checkPrune(t, result, original)
	})
}

// BenchmarkPruneNulls: the byte path on a realistic typed Pod's encoding
// holding creationTimestamp: null (as for a new object), against the
// request's object without it.
func BenchmarkPruneNulls(b *testing.B) {
	y, err := os.ReadFile("../../engine/testdata/ujson/pod.yaml")
	if err != nil {
		b.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		b.Fatal(err)
	}
	var typed corev1.Pod
	if err := json.Unmarshal(j, &typed); err != nil {
		b.Fatal(err)
	}
	pod, err := json.Marshal(&typed)
	if err != nil {
		b.Fatal(err)
	}
	ts := regexp.MustCompile(`"creationTimestamp":"[^"]*",`)
	if !ts.Match(pod) {
		b.Fatal("the Pod's encoding has no creationTimestamp")
	}
	result := ts.ReplaceAll(pod, []byte(`"creationTimestamp":null,`))
	original := ts.ReplaceAll(pod, nil)
	b.SetBytes(int64(len(result)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pruneBytes(result, original); err != nil {
			b.Fatal(err)
		}
	}
}
