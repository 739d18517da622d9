package protocol_test

import (
	"encoding/json"
	"fmt"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

func ExampleValidationResponse() {
	msg, code := "image evil.io/x is not allowed", uint16(403)
	b, _ := json.Marshal(protocol.ValidationResponse{Message: &msg, Code: &code, Warnings: []string{"w"}})
	fmt.Println(string(b))

	var r protocol.ValidationResponse
	_ = json.Unmarshal([]byte(`{"accepted":true}`), &r)
	fmt.Println(r.Accepted, r.Message == nil, r.MutatedObject == nil)
	// Output:
	// {"accepted":false,"message":"image evil.io/x is not allowed","code":403,"warnings":["w"]}
	// true true true
}

func ExampleValidationRequest() {
	payload := []byte(`{"request":{"uid":"1","operation":"CREATE","object":{"kind":"Pod"}},"settings":{}}`)
	var vr protocol.ValidationRequest
	_ = json.Unmarshal(payload, &vr)
	var req protocol.KubernetesAdmissionRequest
	_ = json.Unmarshal(vr.Request, &req)
	fmt.Println(req.UID, req.Operation, string(req.Object), string(vr.Settings))
	// Output: 1 CREATE {"kind":"Pod"} {}
}

func ExampleSettingsValidationResponse() {
	msg := "allowedRegistries must not be empty"
	b, _ := json.Marshal(protocol.SettingsValidationResponse{Message: &msg})
	fmt.Println(string(b))
	// Output: {"valid":false,"message":"allowedRegistries must not be empty"}
}
