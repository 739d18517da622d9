package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// referenceDecode is how the envelope was decoded before the skimmer.
func referenceDecode(payload []byte) (*validationRequest, error) {
	var full struct {
		Request  protocol.KubernetesAdmissionRequest `json:"request"`
		Settings json.RawMessage                     `json:"settings"`
	}
	if err := json.Unmarshal(payload, &full); err != nil {
		return nil, err
	}
	return &validationRequest{Request: full.Request, Settings: full.Settings}, nil
}

var envelopeSeeds = []string{
	`{"request": {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "userInfo": {"username": "alice", "groups": ["a", "b"], "extra": {"x": ["y"]}}, "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p\"}{[", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "args": ["}", "]", "\\"]}]}}, "oldObject": null, "dryRun": true, "options": {"kind": "CreateOptions"}}, "settings": {"policy": {"name": "x"}}}`,
	`{"settings":null,"request":{"operation":"DELETE","oldObject":{"a":[1,2.5e3,-3,true,false,null]}}}`,
	` { "request" : { "object" : [ ] , "namespace" : "ns" } , "settings" : "s" } `,
	`{"request":{}}`,
	`{}`,
	`{"request":null,"settings":{}}`,
	`{"Request":{"operation":"CREATE"},"settings":{}}`,
	`{"request":{"Object":{"a":1},"object":{"b":2}}}`,
	`{"request":{"object":{"a":1},"object":{"b":2}}}`,
	`{"request":{"operation":"CREATE"},"request":{"operation":"UPDATE"}}`,
	`{"request":{"ob\u006aect":{"a":1}}}`,
	`{"request":{"operation":"CREATE","name":"\u00e9\n"},"settings":{"a":"\u0000"}}`,
	`{"request":{"operation":1}}`,
	`{"request":{"object":{"a":1}}`,
	`{"request":{"object":{"a":1}}} x`,
	`{"request":{"object":}}`,
	`[1]`,
	``,
	`{"request":{"uid":"x",}}`,
	`{"request":{"requestKind":{"group":"a","version":"v1"},"requestKind":{"kind":"K"},"requestResource":{"resource":"r"},"requestResource":{"group":"g"}}}`,
	`{"request":{"kind":{"group":"a","group":"b"},"userInfo":{"username":"u"},"userInfo":{"uid":"1","groups":[]}}}`,
	`{"request":{"dryRun":null,"name":null,"userInfo":{"groups":null}}}`,
	`{"request":{"userInfo":{"groups":["a\u0062", "c"],"extra":{"k":["v"]}},"kind":{"Kind":"x"}}}`,
	`{"request":{"name":"ÿ","namespace":1}}`,
	`{"request":{"unknown":{"a":[1]},"uid":"u","dryRun":false}}`,
	`{"request":{"uid" "x"}}`,
}

func TestDecodeValidationRequest(t *testing.T) {
	for _, s := range envelopeSeeds {
		checkEnvelope(t, []byte(s))
	}
	// The apiserver's shape of the small members is decoded by hand.
	members, _ := skimObject([]byte(`{"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "userInfo": {"username": "alice", "groups": ["a", "b"]}, "object": {}, "dryRun": true}`))
	var r protocol.KubernetesAdmissionRequest
	if !decodeSmallMembers(members, &r) || r.UserInfo.Groups[1] != "b" || r.Kind.Kind != "Pod" || !*r.DryRun {
		t.Errorf("decodeSmallMembers refused the common shape or got it wrong: %+v", r)
	}
	// The skimmer itself takes the common shapes (no fallback).
	for _, s := range envelopeSeeds[:6] {
		if _, ok := skimValidationRequest([]byte(s)); !ok {
			t.Errorf("skimmer refused %s", s)
		}
	}
}

func checkEnvelope(t *testing.T, payload []byte) {
	t.Helper()
	want, wantErr := referenceDecode(payload)
	got, err := decodeValidationRequest(payload)
	if wantErr != nil {
		// encoding/json refuses it: an error from the skimmer too, unless
		// what it refuses is inside a value the engine decodes (and
		// validates) later.
		if err == nil {
			if _, ok := skimValidationRequest(payload); !ok {
				t.Fatalf("%q: fallback accepted what encoding/json refuses", payload)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: %v (encoding/json accepts it)", payload, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", payload, got, want)
	}
}

func FuzzDecodeValidationRequest(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkEnvelope(t, payload)
	})
}

func TestMutateResponse(t *testing.T) {
	for _, obj := range []string{
		`{}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a\u003cb","labels":{"x":"y"},"creationTimestamp":null},"spec":{"containers":[{"name":"c","resources":{}}]},"status":{}}`,
	} {
		want, err := kubewarden.MutateRequest(json.RawMessage(obj))
		if err != nil {
			t.Fatal(err)
		}
		if got := fastjson.MutateRequest([]byte(obj)); string(got) != string(want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	}
}
