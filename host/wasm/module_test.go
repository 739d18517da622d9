package wasm_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestModuleReferences checks that each Compile of the same module is a
// reference of its own: the compiled module stays while any is held, and is
// closed when the last is released, however many times each is released.
func TestModuleReferences(t *testing.T) {
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	code := testfixture.Module(t, "test/testdata/policies/misbehave")
	a, err := e.Compile(ctx, code, wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Compile(ctx, code, wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.Modules(); n != 1 {
		t.Fatalf("%d modules, want 1 for two references to one", n)
	}
	a.Release()
	a.Release() // a second Release of a reference gives back nothing more
	if n := e.Modules(); n != 1 {
		t.Fatalf("%d modules while b is held, want 1", n)
	}
	p, err := b.NewPool(ctx, 1)
	if err != nil {
		t.Fatalf("pool of the module after a's release: %v", err)
	}
	if _, err := p.Call(ctx, 0, "protocol_version", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	p.Close(ctx)
	b.Release()
	if n := e.Modules(); n != 0 {
		t.Fatalf("%d modules after releasing every reference, want 0", n)
	}
}
