package opa_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// podRequest is the AdmissionRequest of the 5 KB Pod of test/testdata/reviews, compacted.
func podRequest(b *testing.B) []byte {
	var review struct{ Request json.RawMessage }
	if err := json.Unmarshal(testfixture.File(b, "test/testdata/reviews/pod.json"), &review); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, review.Request); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkEval evaluates the two example policies on the 5 KB Pod: the
// gatekeeper one rejects it (two sprintf calls through the host), the opa
// one accepts it; with the one-call opa_eval (ABI 1.3), with the
// eval-context calls (the same module patched to ABI 1.1), and without the
// interrupt check compiled in.
func BenchmarkEval(b *testing.B) {
	pod := podRequest(b)
	gk := append(append([]byte(`{"parameters":{"registries":["registry.example.com/"]},"review":`), pod...), '}')
	op := append(append([]byte(`{"request":`), pod...), '}')
	for _, bc := range []struct {
		name, dir string
		cfg       opa.Config
		input     []byte
		abi11     bool
	}{
		{"gatekeeper", gatekeeperExample, opa.Config{}, gk, false},
		{"gatekeeper/ctx-calls", gatekeeperExample, opa.Config{}, gk, true},
		{"gatekeeper/uninstrumented", gatekeeperExample, opa.Config{DisableInstrumentation: true}, gk, false},
		{"opa", opaExample, opa.Config{Data: []byte(`{"labels":["app"]}`)}, op, false},
		{"opa/indented", opaExample, opa.Config{Data: []byte(`{"labels":["app"]}`)}, indented(b, op), false},
		{"opa/uninstrumented", opaExample, opa.Config{Data: []byte(`{"labels":["app"]}`), DisableInstrumentation: true}, op, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			code := testfixture.Module(b, bc.dir)
			if bc.abi11 {
				code = setGlobal(b, code, "opa_wasm_abi_minor_version", 1)
			}
			m, err := opa.Compile(context.Background(), nil, code, bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := m.Eval(ctx, time.Second, bc.input, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func indented(b *testing.B, doc []byte) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, doc, "", "  "); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}
