package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
)

// BenchmarkValidate runs the guest's validate natively on the 5 KB Pod of
// test/testdata/reviews with testdata/settings-bench.json's five mutators.
func BenchmarkValidate(b *testing.B) {
	payload := validationRequest(b, "../../test/testdata/reviews/pod.json", "testdata/settings-bench.json")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := validate(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func validationRequest(tb testing.TB, review, settings string) []byte {
	tb.Helper()
	r, err := os.ReadFile(review)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := os.ReadFile(settings)
	if err != nil {
		tb.Fatal(err)
	}
	top, err := jsonv.RawFields(compact(r))
	if err != nil {
		tb.Fatal(err)
	}
	return []byte(`{"request":` + string(top["request"]) + `,"settings":` + string(s) + `}`)
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		panic(err)
	}
	return out.Bytes()
}
