package main

import (
	"encoding/json"
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// BenchmarkValidate is the guest's whole validate (envelope decoding,
// engine, response encoding) on the label case and the sidecar example, with
// testdata/pod.json. Natively, or in Wasm with GOOS=wasip1 GOARCH=wasm go
// test -exec $(go env GOROOT)/lib/wasm/go_wasip1_wasm_exec
// (GOWASIRUNTIME=wazero).
func BenchmarkValidate(b *testing.B) {
	load := func(path string) []byte {
		raw, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(raw)
		if err != nil {
			b.Fatal(err)
		}
		return j
	}
	label, err := yaml.YAMLToJSON([]byte(labelSettings))
	if err != nil {
		b.Fatal(err)
	}
	request := load("testdata/pod.json")
	var review struct {
		Request json.RawMessage `json:"request"`
	}
	if json.Unmarshal(request, &review) == nil && review.Request != nil {
		request = review.Request
	}
	for _, bc := range []struct {
		name     string
		settings []byte
	}{{"label-apply", label}, {"sidecar", load("testdata/sidecar-settings.yml")}} {
		payload, _ := json.Marshal(protocol.ValidationRequest{Request: request, Settings: bc.settings})
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
		b.Run(bc.name+"/envelope", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				vr, err := decodeValidationRequest(payload)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := engineFor(vr.Settings); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

const labelSettings = `
policy:
  apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingAdmissionPolicy
  metadata: {name: label}
  spec:
    matchConstraints:
      resourceRules:
      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
    reinvocationPolicy: Never
    mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"team": "payments"}}}'
`
