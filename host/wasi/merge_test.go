package wasi

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestMergedDataSameMemory checks that the standard-Go fixture's linear
// memory after instantiation is the same, byte for byte, with its data
// segments merged.
func TestMergedDataSameMemory(t *testing.T) {
	ctx := context.Background()
	code := testfixture.Module(t, "test/testdata/policies/wasi-misbehave")
	merged, ok, err := wasmbin.MergeData(code, mergeGap)
	if err != nil || !ok {
		t.Fatalf("merged %v, %v", ok, err)
	}
	m, err := Compile(ctx, nil, code, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	image := func(wasm []byte) []byte {
		cm, err := m.rt.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatal(err)
		}
		mod, err := m.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			t.Fatal(err)
		}
		defer mod.Close(ctx)
		b, _ := mod.Memory().Read(0, mod.Memory().Size())
		return bytes.Clone(b)
	}
	a, b := image(code), image(merged)
	if len(a) < 1<<20 || !bytes.Equal(a, b) {
		t.Fatalf("memory images differ (%d and %d bytes)", len(a), len(b))
	}
}
