package wasm_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

// BenchmarkScreen measures the structural screen of a cold load (ScreenLimits)
// on the largest real module, the 46 MB MutatingAdmissionPolicy built-in: as
// built, and with one more function body holding the bytes of a select typed
// with a typed reference (0x1c 0x01 0x64) without being one, so that a search
// for those bytes cannot spare a walk of every body.
// docs/benchmarks/hostile-modules.md has the figures.
func BenchmarkScreen(b *testing.B) {
	mod := testfixture.Module(b, "policies/mutating-admission-policy")
	lookalike := withBody(b, mod, []byte{0x00, 0x41, 0x1c, 0x01, 0x64, 0x1a, 0x0b}) // i32.const 28; nop; f64.gt; drop
	for _, c := range []struct {
		name string
		mod  []byte
	}{{"map", mod}, {"map+select-bytes", lookalike}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.mod)))
			for b.Loop() {
				if err := wasm.Screen(c.mod); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// withBody returns mod with one more function, of type 0, whose body is body.
func withBody(b *testing.B, mod []byte, body []byte) []byte {
	b.Helper()
	secs, err := wasmbin.Sections(mod)
	if err != nil {
		b.Fatal(err)
	}
	out := append([]byte(nil), wasmbin.Magic...)
	for _, s := range secs {
		if s.ID != 3 && s.ID != 10 { // function, code
			out = append(out, mod[s.Start:s.End]...)
			continue
		}
		n, k, err := wasmenc.ReadULEB128(s.Payload)
		if err != nil {
			b.Fatal(err)
		}
		p := wasmenc.AppendULEB128(nil, n+1)
		p = append(p, s.Payload[k:]...)
		if s.ID == 3 {
			p = wasmenc.AppendULEB128(p, 0)
		} else {
			p = wasmenc.AppendULEB128(p, uint64(len(body)))
			p = append(p, body...)
		}
		out = wasmenc.AppendSection(out, s.ID, p)
	}
	return out
}
