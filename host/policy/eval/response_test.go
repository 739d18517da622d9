package eval

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
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
	var fast, indexed, ref protocol.ValidationResponse
	_, ok := decodeResponseFast([]byte(s), &fast, nil)
	var x fastjson.Index
	mo, okIndexed := decodeResponseFast([]byte(s), &indexed, &x)
	err := json.Unmarshal([]byte(s), &ref)
	// With an index, a mutated_object object is checked: when the fast
	// decoder indexed one, encoding/json takes the answer too and gives what
	// it gives (other values of mutated_object are only skipped, as without).
	if okIndexed && mo[1] > 0 && (err != nil || !reflect.DeepEqual(indexed, ref)) {
		t.Fatalf("%s: the indexing fast decoder took it\nfast      %+v\nreference %+v (%v)", s, indexed, ref, err)
	}
	if okIndexed && mo[1] > 0 && string(s[mo[0]:mo[1]]) != string(ref.MutatedObject) {
		t.Fatalf("%s: mutated_object at %v, want %s", s, mo, ref.MutatedObject)
	}
	if err != nil || !ok {
		// An answer only the fast decoder takes has an invalid mutated_object,
		// which the diff rejects, sending it back to json.Unmarshal.
		return ok && err == nil
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("%s:\nfast      %+v\nreference %+v", s, fast, ref)
	}
	return true
}

// BenchmarkHostWork measures what the host does per evaluation around the
// guest call, on the 5 KB Pod with the capabilities-drop mutation: building
// the ValidationRequest, decoding the answer and diffing mutated_object.
// "reencoded" is the answer of a policy that decodes and encodes the Pod
// with encoding/json (keys sorted, compact); "edited" the answer of one that
// splices its change into the request's bytes (sdk/fastjson).
func BenchmarkHostWork(b *testing.B) {
	review, err := os.ReadFile("../../test/testdata/reviews/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	req, err := admission.ParseReview(review)
	if err != nil {
		b.Fatal(err)
	}
	edited := bytes.Replace(req.Object, []byte(`"NET_BIND_SERVICE"
                ],
                "drop": [
                  "ALL"`), []byte(`"NET_BIND_SERVICE"
                ],
                "drop": [
                  "ALL","BPF"`), 1)
	var v any
	dec := json.NewDecoder(bytes.NewReader(edited))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		b.Fatal(err)
	}
	reencoded, _ := json.Marshal(v)
	c := &Config{ID: "bench", Settings: json.RawMessage(`{}`), MaxResponseBytes: 16 << 20}
	for _, bc := range []struct {
		name   string
		object []byte
	}{{"reencoded", reencoded}, {"edited", edited}} {
		out := []byte(`{"accepted":true,"mutated_object":` + string(bc.object) + `}`)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = c.appendPayload(nil, req.Raw)
				var res Result
				if err := c.decide(&res, req.Object, out); err != nil || res.Patch == nil {
					b.Fatal(err)
				}
			}
		})
	}
}
