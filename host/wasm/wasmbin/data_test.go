package wasmbin_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// memoryAfterInstantiation is the module's linear memory once its data
// segments are applied (no start function runs).
func memoryAfterInstantiation(t *testing.T, wasm []byte) []byte {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Memory().Read(0, m.Memory().Size())
	return bytes.Clone(b)
}

// module is a module with one page of memory and the given active data
// segments (offset, bytes).
func module(segs ...any) []byte {
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 5, 3, 1, 0, 1} // memory section: min 1 page
	var p []byte
	p = append(p, byte(len(segs)/2))
	for i := 0; i < len(segs); i += 2 {
		off, data := segs[i].(int), []byte(segs[i+1].(string))
		p = append(p, 0, 0x41, byte(off&0x7f|0x80), byte(off>>7), 0x0b, byte(len(data)))
		p = append(p, data...)
	}
	b = append(b, 11, byte(len(p)))
	return append(b, p...)
}

func TestMergeDataSynthetic(t *testing.T) {
	in := module(10, "hello", 16, "world", 12, "LL", 300, "far", 200, "mid")
	out, merged, err := wasmbin.MergeData(in, 64)
	if err != nil || !merged {
		t.Fatalf("merged %v err %v", merged, err)
	}
	want, got := memoryAfterInstantiation(t, in), memoryAfterInstantiation(t, out)
	if !bytes.Equal(want, got) {
		t.Fatalf("memory differs: %q vs %q", want[:320], got[:320])
	}
	if string(got[10:21]) != "heLLo\x00world" {
		t.Fatalf("got %q", got[10:21])
	}
	// with gaps of at most 64 bytes merged: 10-21, 200-203 and 300-303
	secs, _ := wasmbin.Sections(out)
	for _, s := range secs {
		if s.ID == 11 && s.Payload[0] != 3 {
			t.Fatalf("%d segments, want 3", s.Payload[0])
		}
	}
	// out of bounds stays out of bounds
	oob := module(10, "x", 20, "yz")
	oob[12] = 0 // no memory pages: every segment is out of bounds
	out, merged, _ = wasmbin.MergeData(oob, 1<<20)
	if !merged {
		t.Fatal("not merged")
	}
	r := wazero.NewRuntime(context.Background())
	defer r.Close(context.Background())
	if _, err := r.Instantiate(context.Background(), out); err == nil {
		t.Fatal("an out-of-bounds segment instantiates once merged")
	}
}
