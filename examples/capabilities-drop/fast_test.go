package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// checkSameAnswer fails unless validate (sdk/fastjson) and validateDecoded (encoding/json) give
// the same answer to payload: same verdict, message and code, and mutated objects that decode
// to the same value (the host's JSONPatch depends on nothing else).
func checkSameAnswer(t testing.TB, payload []byte) {
	t.Helper()
	fast, err1 := validate(payload)
	slow, err2 := validateDecoded(payload)
	if (err1 == nil) != (err2 == nil) {
		t.Fatalf("errors differ: %v / %v", err1, err2)
	}
	if got, want := decodeAnswer(t, fast), decodeAnswer(t, slow); !reflect.DeepEqual(got, want) {
		t.Fatalf("answers differ for %.300s\nfastjson      %s\nencoding/json %s", payload, fast, slow)
	}
}

func decodeAnswer(t testing.TB, out []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("answer %q: %v", out, err)
	}
	if m["mutated_object"] == nil {
		delete(m, "mutated_object")
	}
	return m
}

// TestFastMatchesDecoded runs both paths on every request fixture of the repository: this
// example's, the other examples' and the realistic reviews of test/testdata/reviews.
func TestFastMatchesDecoded(t *testing.T) {
	var files []string
	for _, glob := range []string{"testdata/*.json", "../*/testdata/*.json", "../../test/testdata/reviews/*.json"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	mutated := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var review struct {
			Request json.RawMessage `json:"request"`
		}
		if json.Unmarshal(data, &review) == nil && len(review.Request) > 0 {
			data = review.Request // an AdmissionReview: its request
		}
		payload := []byte(`{"request":` + string(data) + `,"settings":{}}`)
		checkSameAnswer(t, payload)
		if out, _ := validate(payload); bytes.Contains(out, []byte("mutated_object")) {
			mutated++
		}
	}
	if mutated < 3 {
		t.Fatalf("only %d fixtures were mutated", mutated)
	}
}

func FuzzFastMatchesDecoded(f *testing.F) {
	for _, name := range []string{"pod-adds-capabilities.json", "pod-ephemeral-container.json", "pod-delete.json", "pod-already-drops-bpf.json"} {
		request, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(`{"request": ` + string(request) + `, "settings": {}}`))
	}
	for _, s := range []string{
		`{"request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [1, {"securityContext": {"capabilities": {"add": "x", "drop": 3}}}]}}}}`,
		`{"request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"], "drop": "BPF"}}}]}}}}`,
		`{"request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"], "drop": ["B\u0050F"], "drop": null}}}]}}}}`,
		`{"Request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"]}}}]}}}}`,
		`{"request": {"kind": {"kind": "Pod"}}, "request": {"object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"]}}}]}}}}`,
		`{"request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"], "drop": []}}}]}, "spec": {}}}}`,
		`{"request": {"kind": {"kind": "Pod"}, "object": [1]}}`,
		`{"request": {"kind": {"kind": "Pod"}, "object": null}}`,
		`{"request": {"kind": null, "object": {}}}`,
		`{"request": 42}`,
		`{"reque\u017ft": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"]}}}]}}}}`,
		`{"request": {"\u212aind": {"kind": "Pod"}, "kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"]}}}]}}}}`,
		`{"request": {"kInd": {"kind": "Pod"}, "OBJECT": {}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"]}}}]}}}}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) { checkSameAnswer(t, payload) })
}

// TestValidateKeepsItsBuffers: on the realistic 5 KB Pod (mutated), a call after the first
// allocates less than a tenth of the payload's size. The payload's index and the answer are kept
// from call to call (parser, answer): allocated afresh they were five times the payload, garbage
// that made TinyGo's collector sweep the heap every few calls.
func TestValidateKeepsItsBuffers(t *testing.T) {
	data, err := os.ReadFile("../../test/testdata/reviews/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	var review struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"request":` + string(review.Request) + `,"settings":{}}`)
	first, err := validate(payload)
	if err != nil || !bytes.Contains(first, []byte("mutated_object")) {
		t.Fatalf("the Pod is not mutated: %.200s, %v", first, err)
	}
	first = append([]byte(nil), first...)
	const runs = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		out, err := validate(payload)
		if err != nil || !bytes.Equal(out, first) {
			t.Fatalf("call %d answered differently: %v", i, err)
		}
	}
	runtime.ReadMemStats(&after)
	if perCall := (after.TotalAlloc - before.TotalAlloc) / runs; perCall > uint64(len(payload)/10) {
		t.Fatalf("a call allocates %d bytes, want less than %d (a tenth of the %d-byte payload)", perCall, len(payload)/10, len(payload))
	}
}

// TestKeyMatches compares keyMatches with strings.EqualFold and == on the decoded key, for keys
// that are plain ASCII, escaped, or non-ASCII text folding to an ASCII letter (the Kelvin sign
// and the long s).
func TestKeyMatches(t *testing.T) {
	keys := []string{`"kind"`, `"Kind"`, `"KIND"`, `"kinds"`, `"kin"`, `"k\u0069nd"`, `"\u212aind"`, `"\u212Aind"`,
		`"reque\u017ft"`, `"requeſt"`, `"Object"`, `"object"`, `"obj\"ect"`, `""`, `"é"`, `"KİND"`, `"request"`}
	for _, raw := range keys {
		root, err := fastjson.Parse([]byte("{" + raw + ":1}"))
		if err != nil {
			t.Fatal(raw, err)
		}
		it := root.Iter()
		it.Next()
		var text string
		if err := json.Unmarshal([]byte(raw), &text); err != nil {
			t.Fatal(raw, err)
		}
		for _, f := range []string{"kind", "request", "object"} {
			fold, exact := keyMatches(it.Key(), f)
			if fold != strings.EqualFold(text, f) || exact != (text == f) {
				t.Errorf("keyMatches(%s, %q) = %v, %v; want %v, %v", raw, f, fold, exact, strings.EqualFold(text, f), text == f)
			}
		}
	}
}
