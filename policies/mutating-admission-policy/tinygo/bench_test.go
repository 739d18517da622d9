//go:build !wasip1

package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// BenchmarkValidate is this guest's whole validate (envelope decoding, the
// jsonengine evaluation, response encoding) on test/testdata/reviews' 5 KB
// Pod, natively (go test -cpuprofile shows where the time of the TinyGo
// module's evaluation goes: the same code).
func BenchmarkValidate(b *testing.B) {
	raw, err := os.ReadFile("../../../test/testdata/reviews/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	var review struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil || review.Request == nil {
		b.Fatalf("pod.json: %v", err)
	}
	for _, bc := range []struct{ name, settings string }{
		{"label-apply-pod5k", "../testdata/label-settings.yml"},
		{"sidecar-pod5k", "../testdata/sidecar-any-pod-settings.yml"},
	} {
		payload, _ := json.Marshal(protocol.ValidationRequest{Request: review.Request, Settings: readJSON(b, bc.settings)})
		b.Run(bc.name, func(b *testing.B) {
			out, err := validate(payload)
			var r protocol.ValidationResponse
			if err != nil || json.Unmarshal(out, &r) != nil || r.MutatedObject == nil {
				b.Fatalf("%v %s", err, out)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := validate(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
