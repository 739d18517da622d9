package hostile

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
)

// TestModulesDecode checks that every generator writes a module a real
// decoder accepts (wazero's, with the interpreter: nothing is compiled to
// machine code, so even the hostile sizes are cheap to decode here). The
// hostile part is left to the tests of the code that must withstand it.
func TestModulesDecode(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	cases := map[string][]byte{
		"minimal":         Minimal(),
		"locals":          Locals(1000),
		"locals-spread":   LocalsSpread(10, 100),
		"start-loop":      StartLoop(),
		"initialize-loop": InitializeLoop(),
		"nested-blocks":   NestedBlocks(100),
		"nested-ifs":      NestedIfs(100),
		"functions":       Functions(100),
		"opa":             Module{OPA: true, Body: NestedIfsBody(100)}.Bytes(),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			cm, err := r.CompileModule(ctx, b)
			if err != nil {
				t.Fatalf("%s (%d bytes) does not decode: %v", name, len(b), err)
			}
			exp := cm.ExportedFunctions()
			if _, ok := exp["__guest_call"]; !ok {
				t.Fatalf("%s exports no __guest_call: %v", name, exp)
			}
		})
	}
	if n := len(Locals(4_000_000_000)); n > 240 {
		t.Errorf("Locals(4e9) is %d bytes; the hostile module of the issue is about 220", n)
	}
}
