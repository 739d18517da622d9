package jsonengine

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// BenchmarkEvaluate is the native cost of one evaluation on test/testdata/
// reviews' 5 KB Pod: the label apply configuration and the sidecar for any
// Pod (docs/benchmarks/mutating-admission-policy.md's cases). The TinyGo
// module runs the same code; go test -cpuprofile tells where its time goes
// (TinyGo's encoding/json and maps are slower than standard Go's, so the
// shares differ, the hot spots do not).
func BenchmarkEvaluate(b *testing.B) {
	for _, bc := range []struct{ name, settings string }{
		{"label-apply-pod5k", "../testdata/label-settings.yml"},
		{"sidecar-pod5k", "../testdata/sidecar-any-pod-settings.yml"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := compileFile(b, bc.settings)
			req := pod5k(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := e.Evaluate(context.Background(), req)
				if err != nil || res.Object == nil {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}

// BenchmarkFirstUse is what the first evaluation of a new instance pays
// once: decoding the embedded typed table (typed_kinds.json) and
// structured-merge schema (smd_schema.json), and the same by encoding/json
// as it was done before (-library).
func BenchmarkFirstUse(b *testing.B) {
	b.Run("typed-table-library", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := decodeTypedTableLibrary(typedKindsJSON); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("smd-schema-library", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var raw struct {
				Kinds map[string]string `json:"kinds"`
				Types [][2]any          `json:"types"`
			}
			if err := json.Unmarshal(smdSchemaJSON, &raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-table", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := decodeTypedTable(typedKindsJSON); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("smd-schema", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := decodeSMDSchema(smdSchemaJSON); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func compileFile(b testing.TB, path string) *Engine {
	e, err := Compile(readSettings(b, path))
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// readSettings reads a settings file (YAML) as JSON.
func readSettings(b testing.TB, path string) []byte {
	y, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	settings, err := yaml.YAMLToJSON(y)
	if err != nil {
		b.Fatal(err)
	}
	return settings
}

func pod5k(b testing.TB) *protocol.KubernetesAdmissionRequest {
	raw, err := os.ReadFile("../../../test/testdata/reviews/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	var review struct {
		Request *protocol.KubernetesAdmissionRequest `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil || review.Request == nil {
		b.Fatalf("pod.json: %v", err)
	}
	return review.Request
}
