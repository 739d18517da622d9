//go:build !wasip1

package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/jsonengine"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// TestMutateResponse: fastjson.MutateRequest, the guest's answer, gives kubewarden.MutateRequest's bytes
// for objects the engine encoded: the label and sidecar mutations of the
// 5 KB Pod, and an object whose strings hold <, >, &, U+2028 and invalid
// UTF-8 (which json.Marshal escapes, and MutateRequest's compaction would
// escape again if the engine had not).
func TestMutateResponse(t *testing.T) {
	raw, err := os.ReadFile("../../../test/testdata/reviews/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	var review struct {
		Request *protocol.KubernetesAdmissionRequest `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		t.Fatal(err)
	}
	var objects [][]byte
	for _, path := range []string{"../testdata/label-settings.yml", "../testdata/sidecar-any-pod-settings.yml"} {
		e, err := jsonengine.Compile(readJSON(t, path))
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Evaluate(context.Background(), review.Request)
		if err != nil || res.Object == nil {
			t.Fatalf("%s: %v %+v", path, err, res)
		}
		objects = append(objects, res.Object)
	}
	odd := review.Request
	odd.Object = json.RawMessage("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"namespace\":\"storefront\",\"annotations\":{\"x\":\"<b> & \u2028 \xff\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}")
	e, err := jsonengine.Compile(readJSON(t, "../testdata/label-settings.yml"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Evaluate(context.Background(), odd)
	if err != nil || res.Object == nil {
		t.Fatalf("%v %+v", err, res)
	}
	objects = append(objects, res.Object)
	for i, obj := range objects {
		want, err := kubewarden.MutateRequest(json.RawMessage(obj))
		if err != nil {
			t.Fatal(err)
		}
		if got := fastjson.MutateRequest(obj); string(got) != string(want) {
			t.Fatalf("object %d:\n got %.300s\nwant %.300s", i, got, want)
		}
	}
}
