package wasm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// section encodes one section.
func section(id byte, payload ...byte) []byte {
	return append([]byte{id, byte(len(payload))}, payload...)
}

// guest is a module exporting __guest_call (i32, i32) -> i32 whose body is
// body, with the given extra types (after type 0) and other sections placed
// by id.
func guest(extraTypes []byte, nTypes byte, memory, global, elem []byte, body ...byte) []byte {
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	b = append(b, section(1, append([]byte{1 + nTypes, 0x60, 2, 0x7f, 0x7f, 1, 0x7f}, extraTypes...)...)...)
	b = append(b, section(3, 1, 0)...)
	if memory == nil {
		memory = []byte{1, 0, 1}
	}
	b = append(b, section(5, memory...)...)
	if global != nil {
		b = append(b, section(6, global...)...)
	}
	b = append(b, section(7, 1, 12, '_', '_', 'g', 'u', 'e', 's', 't', '_', 'c', 'a', 'l', 'l', 0, 0)...)
	if elem != nil {
		b = append(b, section(9, elem...)...)
	}
	fn := append([]byte{byte(len(body))}, body...)
	return append(b, section(10, append([]byte{1}, fn...)...)...)
}

// uncachedEngine is an engine without a compilation cache, closed when the test ends.
func uncachedEngine(t *testing.T) *wasm.Engine {
	t.Helper()
	e, err := wasm.NewEngine(context.Background(), wasm.Config{DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// TestCompileRefusesByProposal: a module using a proposal tollgate's engine
// does not run is refused with the proposal's name, not wazero's decoder
// message; one with a select of typed references (which wazero miscompiles)
// is refused before compiling.
func TestCompileRefusesByProposal(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	ret0 := []byte{0, 0x41, 0, 0x0b}
	for _, tt := range []struct {
		name string
		code []byte
		want string
	}{
		{"gc", guest([]byte{0x5f, 0}, 1, nil, nil, nil, ret0...),
			"module does not compile: module uses the gc proposal, which tollgate's engine does not support"},
		{"threads", guest(nil, 0, []byte{1, 3, 1, 1}, nil, nil, ret0...),
			"module uses the threads proposal, which tollgate's engine does not support (threads: a guest blocked in memory.atomic.wait could not be stopped at its deadline)"},
		{"memory64", guest(nil, 0, []byte{1, 4, 1}, nil, nil, ret0...),
			"module uses the memory64 proposal, which tollgate's engine does not support"},
		{"multi-memory", guest(nil, 0, []byte{2, 0, 1, 0, 1}, nil, nil, ret0...),
			"module uses the multi-memory proposal, which tollgate's engine does not support"},
		{"exception-handling", guest(nil, 0, nil, nil, nil, 0, 0x1f, 0x7f, 0, 0x41, 0, 0x0b, 0x0b),
			"module uses the exception-handling proposal, which tollgate's engine does not support (exception-handling: wasmtime"},
		{"typed select", guest(nil, 0, nil, nil, []byte{1, 3, 0, 1, 0}, 0, 0xd2, 0, 0xd2, 0, 0x41, 1, 0x1c, 1, 0x64, 0x70, 0x1a, 0x41, 0, 0x0b),
			"function body 0 uses a select typed with a typed function reference (function-references), which tollgate's engine (wazero v1.12) compiles wrongly"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Compile(ctx, tt.code, wasm.ModuleConfig{})
			if !errors.Is(err, wasm.ErrCompile) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}

// TestCompileAcceptsNewProposals: tail calls, typed function references and
// extended constant expressions compile, are instrumented, and run.
func TestCompileAcceptsNewProposals(t *testing.T) {
	ctx := context.Background()
	e := uncachedEngine(t)
	for _, tt := range []struct {
		name string
		code []byte
	}{
		// global 0 = 2*3 (extended-const); __guest_call returns it.
		{"extended-const", guest(nil, 0, nil, []byte{1, 0x7f, 0, 0x41, 2, 0x41, 3, 0x6c, 0x0b}, nil, 0, 0x23, 0, 0x0b)},
		// a (ref null 0) local, ref.func, ref.as_non_null and return_call_ref to itself is not run: br_on_null on a null
		{"function-references and tail calls", guest(nil, 0, nil, nil, []byte{1, 3, 0, 1, 0},
			1, 1, 0x63, 0, 0x02, 0x40, 0x20, 2, 0xd5, 0, 0x20, 0, 0x20, 1, 0x20, 2, 0xd4, 0x15, 0, 0x0b, 0x41, 6, 0x0b)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := e.Compile(ctx, tt.code, wasm.ModuleConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			if !m.Interruptible() {
				t.Fatal("not instrumented")
			}
		})
	}

	// The standard-Go waPC example through binaryen 116's wasm-opt --all-features -Oz.
	m, err := e.Compile(ctx, testfixture.File(t, "examples/go-image-registries/policy.opt.wasm"), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if !m.Interruptible() {
		t.Fatal("the wasm-opt build of go-image-registries is not instrumented")
	}
}
