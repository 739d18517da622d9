package wasm_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// spinModule is a hand-assembled waPC guest whose __guest_call spins forever
// in a loop that calls nothing, touches no memory and no global: only an
// interrupt check can stop it. With initLoop, its `_initialize` spins instead.
// With takeName, it exports a global under the name Instrument reserves, so
// that Instrument refuses it.
func spinModule(initLoop, takeName bool) []byte {
	sec := func(id byte, p ...byte) []byte { return append([]byte{id, byte(len(p))}, p...) }
	spin := []byte{0, 0x03, 0x40, 0x0c, 0x00, 0x0b} // loop br 0 end
	b := append([]byte{}, wasmbin.Magic...)
	b = append(b, sec(1, 2, 0x60, 2, 0x7f, 0x7f, 1, 0x7f, 0x60, 0, 0)...) // (i32 i32)->i32, ()->()
	b = append(b, sec(3, 2, 0, 1)...)                                     // __guest_call, _initialize
	b = append(b, sec(5, 1, 0, 1)...)                                     // memory 1 page
	exports := []byte{3}
	if takeName {
		b = append(b, sec(6, 1, 0x7f, 1, 0x41, 0, 0x0b)...)
		exports = []byte{4, byte(len(wasmbin.InterruptGlobal))}
		exports = append(exports, wasmbin.InterruptGlobal...)
		exports = append(exports, 3, 0)
	}
	exports = append(exports, 12)
	exports = append(exports, "__guest_call"...)
	exports = append(exports, 0, 0, 11)
	exports = append(exports, "_initialize"...)
	exports = append(exports, 0, 1, 6)
	exports = append(exports, "memory"...)
	exports = append(exports, 2, 0)
	b = append(b, sec(7, exports...)...)
	call := append(append([]byte{}, spin...), 0x41, 0, 0x0b) // ... i32.const 0
	init := []byte{0, 0x0b}
	if initLoop {
		call = []byte{0, 0x41, 0, 0x0b}
		init = append(append([]byte{}, spin...), 0x0b)
	}
	code := []byte{2, byte(len(call))}
	code = append(code, call...)
	code = append(code, byte(len(init)))
	code = append(code, init...)
	return append(b, sec(10, code...)...)
}

// fibModule is a waPC guest whose __guest_call computes a naive recursive
// fib(60): no loop at all, a stack depth of 60, and about 2^42 calls. Only a
// check at function entries stops it.
func fibModule() []byte {
	return guestModule([]byte{2, 0x60, 2, 0x7f, 0x7f, 1, 0x7f, 0x60, 1, 0x7f, 1, 0x7f}, // (i32 i32)->i32, (i32)->i32
		[]byte{0, 0x41, 60, 0x10, 1, 0x1a, 0x41, 0, 0x0b}, // fib(60); drop; i32.const 0
		[]byte{0,
			0x20, 0, 0x41, 2, 0x49, 0x04, 0x7f, // if n < 2 (result i32)
			0x20, 0, // n
			0x05,                            // else
			0x20, 0, 0x41, 1, 0x6b, 0x10, 1, // fib(n-1)
			0x20, 0, 0x41, 2, 0x6b, 0x10, 1, // fib(n-2)
			0x6a, 0x0b, 0x0b}) // add; end; end
}

// guestModule is a waPC guest of the given type section contents and
// function bodies (each with its locals): the first body is __guest_call
// (type 0), the others have type 1; one page of memory, exported, no
// imports.
func guestModule(types []byte, bodies ...[]byte) []byte {
	sec := func(id byte, p ...byte) []byte { return append([]byte{id, byte(len(p))}, p...) }
	b := append([]byte{}, wasmbin.Magic...)
	b = append(b, sec(1, types...)...)
	funcs := []byte{byte(len(bodies)), 0}
	for range bodies[1:] {
		funcs = append(funcs, 1)
	}
	b = append(b, sec(3, funcs...)...)
	b = append(b, sec(5, 1, 0, 1)...) // memory 1 page
	exports := []byte{2, 12}
	exports = append(exports, "__guest_call"...)
	exports = append(exports, 0, 0, 6)
	exports = append(exports, "memory"...)
	exports = append(exports, 2, 0)
	b = append(b, sec(7, exports...)...)
	code := []byte{byte(len(bodies))}
	for _, body := range bodies {
		code = append(append(code, byte(len(body))), body...)
	}
	return append(b, sec(10, code...)...)
}

func newEngine(t *testing.T, cfg wasm.Config) *wasm.Engine {
	t.Helper()
	cfg.DisableCache = true
	e, err := wasm.NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// A module Instrument refuses has nothing in the load cache: the directory
// the engine made for it there is removed again.
func TestNotInstrumentableLeavesNoLoadCacheDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := newCachedEngine(t, dir)
	mod := spinModule(false, true)
	m, err := e.Compile(ctx, mod, wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if m.Interruptible() {
		t.Fatal("the module was instrumented")
	}
	requireNoLoadCacheDir(t, dir, mod, "it cannot hold")
}

// A module Instrument takes but wazero refuses leaves no directory in the
// load cache either.
func TestInvalidModuleLeavesNoLoadCacheDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := newCachedEngine(t, dir)
	// __guest_call returns an i32: without its i32.const 0 (now two nops),
	// its body does not validate.
	mod := spinModule(false, false)
	i := bytes.Index(mod, []byte{0x0b, 0x41, 0x00, 0x0b})
	if i < 0 {
		t.Fatal("spinModule changed: no i32.const 0 at the end of __guest_call")
	}
	copy(mod[i+1:], []byte{0x01, 0x01})
	if _, _, err := wasmbin.Instrument(mod); err != nil {
		t.Fatalf("Instrument refuses the module, the test needs one it takes: %v", err)
	}
	if m, err := e.Compile(ctx, mod, wasm.ModuleConfig{}); err == nil {
		m.Release()
		t.Fatal("wazero compiled a module that does not validate")
	}
	requireNoLoadCacheDir(t, dir, mod, "wazero refuses")
}

// newCachedEngine is an engine with its on-disk caches in dir.
func newCachedEngine(t *testing.T, dir string) *wasm.Engine {
	t.Helper()
	e, err := wasm.NewEngine(context.Background(), wasm.Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// requireNoLoadCacheDir fails unless the cache directory dir holds no load
// cache directory for mod, a module that the load cache must not hold
// (because: why, for the message).
func requireNoLoadCacheDir(t *testing.T, dir string, mod []byte, why string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "*", strings.TrimPrefix(wasm.Digest(mod), "sha256:")))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("the load cache kept a directory for a module %s: %v", why, left)
	}
}

func TestInterruptEndlessLoop(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name          string
		wasm          []byte
		cfg           wasm.Config
		interruptible bool
	}{
		{"instrumented", spinModule(false, false), wasm.Config{}, true},
		{"instrumented, recursion without loops", fibModule(), wasm.Config{}, true},
		{"instrumentation disabled", spinModule(false, false), wasm.Config{DisableInstrumentation: true}, false},
		// Instrument refuses the module: the engine falls back to close-on-context-done.
		{"fallback: module not instrumentable", spinModule(false, true), wasm.Config{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, tt.cfg)
			m, err := e.Compile(ctx, tt.wasm, wasm.ModuleConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			if m.Interruptible() != tt.interruptible {
				t.Fatalf("Interruptible() = %v, want %v", m.Interruptible(), tt.interruptible)
			}
			p, err := m.NewPool(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			for round := 0; round < 3; round++ {
				start := time.Now()
				_, err := p.Call(ctx, 100*time.Millisecond, "x", nil)
				if !errors.Is(err, wasm.ErrTimeout) {
					t.Fatalf("round %d: want ErrTimeout, got %v", round, err)
				}
				if d := time.Since(start); d > time.Second {
					t.Fatalf("round %d: stopped after %s, want about 100ms", round, d)
				}
				if p.Live() != 0 {
					t.Fatalf("round %d: the interrupted instance was kept (%d live)", round, p.Live())
				}
			}
		})
	}
}

// TestInterruptWithBusyScheduler runs more spinning guests than the Go
// scheduler has Ps, while the garbage collector runs: compiled guest code
// cannot be preempted, so an instrumented guest must visit Go regularly or
// the collector's stop-the-world (and the timers that set the interrupt
// flags) wait for it forever.
func TestInterruptWithBusyScheduler(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, wasm.Config{})
	m, err := e.Compile(ctx, spinModule(false, false), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	n := runtime.GOMAXPROCS(0) + 2
	p, err := m.NewPool(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	stopGC := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stopGC:
				return
			default:
				runtime.GC()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	start := time.Now()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := p.Call(ctx, 200*time.Millisecond, "x", nil)
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, wasm.ErrTimeout) {
				t.Errorf("call %d: want ErrTimeout, got %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d spinning guests still running after 10s", n-i, n)
		}
	}
	close(stopGC)
	<-gcDone
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("%d guests with a 200ms deadline took %s", n, d)
	}
}

func TestInterruptStartFunction(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, wasm.Config{})
	m, err := e.Compile(ctx, spinModule(true, false), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if !m.Interruptible() {
		t.Fatal("module not instrumented")
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.NewPool(cctx, 1)
	if !errors.Is(err, wasm.ErrInstantiate) || !errors.Is(err, wasm.ErrTimeout) {
		t.Fatalf("want ErrInstantiate and ErrTimeout, got %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("stopped after %s, want about 100ms", d)
	}
}

// TestInstrumentRealPolicies instruments every built policy fixture, runs it
// once, and checks that the instrumented module is the one in use.
func TestInstrumentRealPolicies(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, wasm.Config{})
	for _, dir := range []string{"examples/required-labels", "examples/go-image-registries", "examples/capabilities-drop", "examples/raw-validation", "test/testdata/policies/misbehave"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := testfixture.Module(t, dir)
			if _, _, err := wasmbin.Instrument(b); err != nil {
				t.Fatalf("Instrument: %v", err)
			}
			m, err := e.Compile(ctx, b, wasm.ModuleConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			if !m.Interruptible() {
				t.Fatal("module not instrumented")
			}
			if m.Digest() != wasm.Digest(b) {
				t.Fatalf("digest %s, want the original's %s", m.Digest(), wasm.Digest(b))
			}
			p, err := m.NewPool(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			// Settings validation exists in every Kubewarden policy; an answer
			// (valid or not) proves the instrumented code runs.
			out, err := p.Call(ctx, 5*time.Second, "validate_settings", []byte(`{}`))
			if err != nil || len(out) == 0 {
				t.Fatalf("validate_settings: %q %v", out, err)
			}
		})
	}
}

// BenchmarkInstrument measures the rewrite on a TinyGo policy, on the
// MutatingAdmissionPolicy built-in (TinyGo, about 4.4 MB) and on the largest
// standard-Go module of the fixtures (test/testdata/policies/wasi-big, about
// 20 MB; the standard-Go MAP module is no longer built by default).
func BenchmarkInstrument(b *testing.B) {
	for _, dir := range []string{"examples/required-labels", "policies/mutating-admission-policy", "test/testdata/policies/wasi-big"} {
		b.Run(filepath.Base(dir), func(b *testing.B) {
			in := testfixture.Module(b, dir)
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, _, err := wasmbin.Instrument(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestInstrumentLargeModules checks that the decoder understands every
// instruction of the largest modules the tests build: the
// MutatingAdmissionPolicy built-in (TinyGo since issue 31) and the 20 MB
// standard-Go wasi-big fixture, which stands in for the standard-Go MAP module
// that is no longer built by default (compiling and running the built-in
// instrumented is covered by test/mapdiff and the builtin tests).
func TestInstrumentLargeModules(t *testing.T) {
	for _, dir := range []string{"policies/mutating-admission-policy", "test/testdata/policies/wasi-big"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := testfixture.Module(t, dir)
			out, name, err := wasmbin.Instrument(b)
			if err != nil {
				t.Fatalf("Instrument: %v", err)
			}
			exps, err := wasmbin.Exports(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range exps {
				if e.Name == name {
					return
				}
			}
			t.Fatalf("the instrumented module does not export %s", name)
		})
	}
}

// FuzzInstrumentCompiles is a differential check of the decoder against
// wazero's: for any module wazero accepts, Instrument either refuses it or
// returns a module wazero accepts too.
func FuzzInstrumentCompiles(f *testing.F) {
	f.Add(spinModule(false, false))
	f.Add(spinModule(true, false))
	f.Add(spinModule(false, true))
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Cleanup(func() { _ = r.Close(ctx) })
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := r.CompileModule(ctx, in)
		if err != nil {
			return
		}
		_ = c.Close(ctx)
		out, _, err := wasmbin.Instrument(in)
		if err != nil {
			return
		}
		c, err = r.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("wazero accepts the module but not its instrumented version: %v", err)
		}
		_ = c.Close(ctx)
	})
}
