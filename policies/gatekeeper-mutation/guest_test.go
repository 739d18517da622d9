package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
)

// TestSystemCacheEvicts cycles through more distinct settings than the cache
// of compiled settings holds, twice: every answer carries its own settings'
// label value, whether its System was cached or compiled again after
// eviction.
func TestSystemCacheEvicts(t *testing.T) {
	base, err := os.ReadFile("testdata/settings-bench.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(base), `"tollgate"`) {
		t.Fatal(`testdata/settings-bench.json no longer sets the value "tollgate"`)
	}
	n := maxCachedSettings + 3
	dir := t.TempDir()
	payloadOf := func(i int) []byte {
		s := strings.ReplaceAll(string(base), `"tollgate"`, fmt.Sprintf(`"tollgate-%d"`, i))
		path := fmt.Sprintf("%s/settings-%d.json", dir, i)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return validationRequest(t, "../../test/testdata/reviews/pod.json", path)
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < n; i++ {
			out, err := validate(payloadOf(i))
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`"mutated-by":"tollgate-%d"`, i); !strings.Contains(string(out), want) {
				t.Fatalf("round %d, settings %d: want %s in %.300s", round, i, want, out)
			}
		}
	}
	if got := compiled.lru.Len(); got != maxCachedSettings {
		t.Fatalf("%d compiled settings cached, want %d", got, maxCachedSettings)
	}
}

// TestAnswerCopiesUntouchedBytes: the parts of the request's object that no
// mutator reaches are copied into the answer as they came (the object is
// read lazily), here the indented spec.volumes and spec.tolerations
// of the 5 KB Pod (an encoding of a parsed tree would be compact); the
// answer is still the whole mutated object.
func TestAnswerCopiesUntouchedBytes(t *testing.T) {
	review, err := os.ReadFile("../../test/testdata/reviews/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	settings, err := os.ReadFile("testdata/settings-bench.json")
	if err != nil {
		t.Fatal(err)
	}
	top, err := jsonv.RawFields(review) // not compacted
	if err != nil {
		t.Fatal(err)
	}
	out, err := validate([]byte(`{"request":` + string(top["request"]) + `,"settings":` + string(settings) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Accepted      bool            `json:"accepted"`
		MutatedObject json.RawMessage `json:"mutated_object"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || !answer.Accepted {
		t.Fatalf("answer %.200s: %v", out, err)
	}
	req, _ := jsonv.RawFields(top["request"])
	obj, _ := jsonv.RawFields(req["object"])
	spec, _ := jsonv.RawFields(obj["spec"])
	for name, raw := range map[string][]byte{"spec.volumes": spec["volumes"], "spec.tolerations": spec["tolerations"]} {
		if len(raw) < 100 || !bytes.Contains(raw, []byte("\n ")) {
			t.Fatalf("%s of the review is no longer indented JSON of some size: the test needs another field", name)
		}
		if !bytes.Contains(answer.MutatedObject, raw) {
			t.Errorf("the answer does not hold %s's bytes as they came", name)
		}
	}
	var got, want map[string]any
	if err := json.Unmarshal(answer.MutatedObject, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(req["object"], &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got["status"], want["status"]) || !reflect.DeepEqual(got["apiVersion"], want["apiVersion"]) {
		t.Fatal("the answer lost parts of the object")
	}
	md := got["metadata"].(map[string]any)
	if md["labels"].(map[string]any)["mutated-by"] != "tollgate" {
		t.Fatalf("not mutated: %v", md["labels"])
	}
}
