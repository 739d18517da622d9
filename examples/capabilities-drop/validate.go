package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	kubewarden "github.com/kubewarden/policy-sdk-go"
)

// droppedCapability is the capability added to the drop list of every container that adds
// capabilities.
const droppedCapability = "BPF"

// containerFields are the fields of a PodSpec holding containers, in the order they are visited.
var containerFields = []string{"containers", "initContainers", "ephemeralContainers"}

// validationRequest is the part of the ValidationRequest the policy reads. Decoding only these
// fields, rather than protocol.ValidationRequest with the whole AdmissionRequest, keeps TinyGo's
// reflection-based encoding/json off most of the payload.
type validationRequest struct {
	Request struct {
		Kind struct {
			Kind string `json:"kind"`
		} `json:"kind"`
		Object json.RawMessage `json:"object"`
	} `json:"request"`
}

// validateDecoded is validate through encoding/json: the request decoded into a struct, the Pod
// into a map[string]interface{}, the mutated Pod encoded again whole. validate uses it for the
// payloads its fast path does not take as they are (malformed JSON, unexpected types, keys that
// match the request's field names only case-insensitively, repeated keys), so that those get
// exactly the answers they always got; the tests compare the two on every fixture.
//
// The object is handled as generic JSON (numbers kept as json.Number) rather than through the
// typed k8s-objects structs: those drop unknown fields and `false` booleans when they are encoded
// again, which would turn into spurious JSONPatch operations. Here the only difference between
// the request object and mutated_object is the added "BPF".
func validateDecoded(payload []byte) ([]byte, error) {
	var req validationRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("cannot decode the validation request: %v", err)),
			kubewarden.Code(400))
	}
	if req.Request.Kind.Kind != "Pod" || isNull(req.Request.Object) {
		// Not a Pod, or a DELETE (no object): nothing to mutate.
		return kubewarden.AcceptRequest()
	}

	var pod map[string]interface{}
	dec := json.NewDecoder(bytes.NewReader(req.Request.Object))
	dec.UseNumber()
	if err := dec.Decode(&pod); err != nil {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("cannot decode the Pod: %v", err)),
			kubewarden.Code(400))
	}
	if !dropFromPod(pod) {
		return kubewarden.AcceptRequest()
	}
	return kubewarden.MutateRequest(pod)
}

// dropFromPod adds droppedCapability to every container of pod that adds capabilities and does
// not drop it already. It reports whether pod changed.
func dropFromPod(pod map[string]interface{}) bool {
	spec, _ := pod["spec"].(map[string]interface{})
	changed := false
	for _, field := range containerFields {
		containers, _ := spec[field].([]interface{})
		for _, c := range containers {
			container, _ := c.(map[string]interface{})
			if dropFromContainer(container) {
				changed = true
			}
		}
	}
	return changed
}

func dropFromContainer(container map[string]interface{}) bool {
	securityContext, _ := container["securityContext"].(map[string]interface{})
	capabilities, _ := securityContext["capabilities"].(map[string]interface{})
	add, _ := capabilities["add"].([]interface{})
	if len(add) == 0 {
		return false
	}
	drop, _ := capabilities["drop"].([]interface{})
	for _, d := range drop {
		if d == droppedCapability {
			return false
		}
	}
	capabilities["drop"] = append(drop, droppedCapability)
	return true
}

func isNull(raw json.RawMessage) bool {
	trimmed := bytes.TrimSpace(raw)
	return len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null"))
}
