// Command namespace-label is a test fixture: a context-aware waPC policy that reads the namespace
// of the request through the kubernetes/get_resource host capability and rejects the request when
// that namespace lacks the label its settings name. See README.md.
package main

import (
	"encoding/json"
	"errors"

	wapc "github.com/wapc/wapc-guest-tinygo"
)

func main() {
	wapc.RegisterFunctions(wapc.Functions{
		"validate":          validate,
		"validate_settings": validateSettings,
		"protocol_version":  func([]byte) ([]byte, error) { return []byte(`"v1"`), nil },
	})
}

// hostCall is the waPC host call (a variable, so native tests can answer it).
var hostCall = wapc.HostCall

type settings struct {
	// Label is the label the request's namespace must carry.
	Label string `json:"label"`
}

type validationRequest struct {
	Request struct {
		Namespace string `json:"namespace"`
	} `json:"request"`
	Settings settings `json:"settings"`
}

// getResource is Kubewarden's kubernetes/get_resource payload.
type getResource struct {
	APIVersion   string `json:"api_version"`
	Kind         string `json:"kind"`
	Name         string `json:"name"`
	DisableCache bool   `json:"disable_cache"`
}

type namespace struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

func validate(payload []byte) ([]byte, error) {
	var vr validationRequest
	if err := json.Unmarshal(payload, &vr); err != nil {
		return reject("cannot decode the request: " + err.Error())
	}
	if vr.Request.Namespace == "" {
		return json.Marshal(map[string]interface{}{"accepted": true})
	}
	req, _ := json.Marshal(getResource{APIVersion: "v1", Kind: "Namespace", Name: vr.Request.Namespace})
	answer, err := hostCall("kubewarden", "kubernetes", "get_resource", req)
	if err != nil {
		return reject("cannot read namespace " + vr.Request.Namespace + ": " + err.Error())
	}
	var ns namespace
	if err := json.Unmarshal(answer, &ns); err != nil {
		return reject("namespace " + vr.Request.Namespace + ": the host's answer is not a Namespace: " + err.Error())
	}
	if _, ok := ns.Metadata.Labels[vr.Settings.Label]; !ok {
		return reject("namespace " + vr.Request.Namespace + " has no label " + vr.Settings.Label)
	}
	return json.Marshal(map[string]interface{}{"accepted": true})
}

func reject(msg string) ([]byte, error) {
	return json.Marshal(map[string]interface{}{"accepted": false, "message": msg, "code": 403})
}

func validateSettings(payload []byte) ([]byte, error) {
	var s settings
	if err := json.Unmarshal(payload, &s); err != nil {
		return json.Marshal(map[string]interface{}{"valid": false, "message": "settings: " + err.Error()})
	}
	if s.Label == "" {
		return json.Marshal(map[string]interface{}{"valid": false, "message": errors.New("settings: label is required").Error()})
	}
	return json.Marshal(map[string]interface{}{"valid": true})
}
