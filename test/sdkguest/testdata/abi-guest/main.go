// Command abi-guest is a test fixture for sdk/guest run through the host: its
// `validate` does what the request's object.action says (panic, fail, call
// the host, echo a large payload) so that each path of the guest ABI can be
// checked from outside the Wasm module.
package main

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

func init() {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate":          validate,
		"validate_settings": func([]byte) ([]byte, error) { return kubewarden.AcceptSettings() },
	})
}

func main() {}

func validate(payload []byte) ([]byte, error) {
	req, err := kubewarden.ParseValidationRequest(payload, nil)
	if err != nil {
		return nil, err
	}
	var obj struct {
		Action string `json:"action"`
		Data   string `json:"data"`
	}
	if err := json.Unmarshal(req.Object, &obj); err != nil {
		return nil, err
	}
	switch obj.Action {
	case "panic":
		var m map[string]int
		m["boom"]++
	case "fail":
		return nil, errors.New("the policy failed on purpose")
	case "hostcall":
		_, err := guest.HostCall("kubewarden", "net", "v1/dns_lookup_host", []byte(`"example.com"`))
		var he *guest.HostError
		if !errors.As(err, &he) {
			return kubewarden.RejectRequest("host call did not fail", 500)
		}
		return kubewarden.RejectRequest(kubewarden.Message("host said: "+he.Message), 500)
	case "echo-size":
		return kubewarden.RejectRequest(kubewarden.Message("payload "+strconv.Itoa(len(payload))+" data "+strconv.Itoa(len(obj.Data))), 400)
	}
	return kubewarden.AcceptRequest()
}
