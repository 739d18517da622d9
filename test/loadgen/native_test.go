package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/tollgate-dev/tollgate/host/admission"
)

// byValue is capabilities-drop written the plain way: decode the whole Pod,
// change the map, diff by value. nativeCapabilitiesDrop must answer the same
// JSONPatch, byte for byte.
func byValue(t *testing.T, object []byte) []byte {
	var pod map[string]any
	d := json.NewDecoder(bytes.NewReader(object))
	d.UseNumber()
	if err := d.Decode(&pod); err != nil {
		t.Fatal(err)
	}
	spec, _ := pod["spec"].(map[string]any)
	for _, f := range []string{"containers", "initContainers", "ephemeralContainers"} {
		cs, _ := spec[f].([]any)
		for _, c := range cs {
			cm, _ := c.(map[string]any)
			sc, _ := cm["securityContext"].(map[string]any)
			caps, _ := sc["capabilities"].(map[string]any)
			if add, _ := caps["add"].([]any); len(add) == 0 {
				continue
			}
			drop, _ := caps["drop"].([]any)
			has := false
			for _, x := range drop {
				has = has || x == "BPF"
			}
			if !has {
				caps["drop"] = append(drop, "BPF")
			}
		}
	}
	mutated, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := admission.Diff(object, mutated)
	if err != nil {
		t.Fatal(err)
	}
	if string(patch) == "[]" {
		return nil
	}
	return patch
}

// TestNativeCapabilitiesDrop: the native reference decides and patches as
// the plain by-value webhook does, on the realistic Pod and on Pods with
// init and ephemeral containers, drop lists absent, present, or holding BPF.
func TestNativeCapabilitiesDrop(t *testing.T) {
	review, err := readReview(filepath.Join("../..", "test/testdata/reviews/pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := admission.ParseReview(review)
	if err != nil {
		t.Fatal(err)
	}
	objects := [][]byte{req.Object,
		[]byte(`{"spec":{"containers":[{"name":"a"},{"name":"b","securityContext":{"capabilities":{"add":["X"]}}}],` +
			`"initContainers":[{"securityContext":{"capabilities":{"add":["X"],"drop":["BPF"]}}},{"securityContext":{"capabilities":{"add":["X"],"drop":["A","B"]}}}],` +
			`"ephemeralContainers":[{"securityContext":{"capabilities":{"add":["Y"],"drop":[]}}}]}}`),
		[]byte(`{"spec":{"containers":[{"securityContext":{"capabilities":{"drop":["ALL"]}}}]}}`),
		[]byte(`{"metadata":{"name":"x"}}`),
	}
	mutated := 0
	for _, obj := range objects {
		v := nativeCapabilitiesDrop(&admission.Request{Object: obj})
		want := byValue(t, obj)
		if !v.Accepted || string(v.Patch) != string(want) {
			t.Errorf("object %s:\nnative  %v %s\nby value %s", obj, v.Accepted, v.Patch, want)
		}
		if want != nil {
			mutated++
		}
	}
	if mutated != 2 {
		t.Fatalf("%d objects mutated, want 2 (the realistic Pod and the second)", mutated)
	}
}
