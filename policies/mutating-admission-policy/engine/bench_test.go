package engine

import (
	"context"
	"testing"
)

// BenchmarkEvaluate is the native cost of one evaluation of the sidecar
// example and of a label-adding apply configuration on a Pod CREATE.
func BenchmarkEvaluate(b *testing.B) {
	for _, bc := range []struct{ name, settings string }{
		{"label-apply", policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'team': 'payments'}}}"}`)},
		{"sidecar", sidecarJSONPatch},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := Compile([]byte(bc.settings))
			if err != nil {
				b.Fatal(err)
			}
			r := req{object: pod}.build(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := e.Evaluate(context.Background(), r)
				if err != nil || res.Object == nil {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
