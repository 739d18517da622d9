package jsonv

import (
	"os"
	"testing"
)

// benchPod is the object of the realistic 5 KB Pod review
// (test/testdata/reviews/pod.json).
func benchPod(b *testing.B) *Value {
	data, err := os.ReadFile("../../../../test/testdata/reviews/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	_, _, obj, err := RawFieldsNested(data, "request", "object", IntsPreserved)
	if err != nil || obj == nil {
		b.Fatal("no request object", err)
	}
	return obj
}

// BenchmarkEncodePod encodes the 5 KB Pod as the engine does once per
// mutated request (Encode) and twice per convergence loop (AppendTyped).
func BenchmarkEncodePod(b *testing.B) {
	obj := benchPod(b)
	buf := make([]byte, 0, 16<<10)
	for _, bc := range []struct {
		name   string
		encode func([]byte, *Value) []byte
	}{{"Encode", Encode}, {"AppendTyped", AppendTyped}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf = bc.encode(buf[:0], obj)
			}
		})
	}
}
