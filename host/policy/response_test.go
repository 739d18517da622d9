package policy

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

var responseCases = []string{
	`{"accepted":true}`,
	`{"accepted":false,"message":"no","code":403}`,
	` {"accepted" : true, "mutated_object": {"a":[1,"]}"],"b":{}} ,"warnings":["w"],"audit_annotations":{"k":"v"}} `,
	`{"accepted":true,"mutated_object":null}`,
	`{"accepted":true,"message":null,"code":null,"warnings":null}`,
	`{"Accepted":true}`,
	`{"accepted":true,"accepted":false}`,
	`{"accepted":true,"other":1}`,
	`{"accepted":"yes"}`,
	`{"accepted":true,"code":70000}`,
	`{"accepted":true}x`,
	`{"accepted":tru}`,
	`{"accepted":true,"mutated_object":"\"}"}`,
	`[]`,
	`{}`,
	``,
}

// TestDecodeResponseFast: whenever the fast decoder accepts an answer that
// encoding/json decodes, both give the same ValidationResponse.
func TestDecodeResponseFast(t *testing.T) {
	accepted := 0
	for _, c := range responseCases {
		if checkDecode(t, c) {
			accepted++
		}
	}
	if accepted < 4 {
		t.Fatalf("the fast decoder took only %d plain answers", accepted)
	}
}

func FuzzDecodeResponseFast(f *testing.F) {
	for _, c := range responseCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, s string) { checkDecode(t, s) })
}

func checkDecode(t *testing.T, s string) bool {
	t.Helper()
	var fast, ref protocol.ValidationResponse
	ok := decodeResponseFast([]byte(s), &fast)
	if err := json.Unmarshal([]byte(s), &ref); err != nil || !ok {
		// An answer only the fast decoder takes has an invalid mutated_object,
		// which the diff rejects, sending it back to json.Unmarshal.
		return ok && err == nil
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("%s:\nfast      %+v\nreference %+v", s, fast, ref)
	}
	return true
}
