package wasm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// noLimits lets every hostile module through to the compiler.
var noLimits = wasm.Limits{Locals: 1<<32 - 1, Nesting: 1<<32 - 1, BodyBytes: 1<<32 - 1}

// TestCompileOverBudgetFailsOnlyItsModule: with the structural limits out
// of the way, a compile that needs more memory or time than its budget is
// stopped in the compiler process, and only that module fails, with the
// reason; the engine goes on compiling. In the old engine these compiles
// ran in the test process: 4e9 locals killed it (fatal error: out of
// memory), 1e8 locals took 2.6 GB, 4,000 nested ifs 6.5 s (checked on a
// busy machine).
func TestCompileOverBudgetFailsOnlyItsModule(t *testing.T) {
	ctx := context.Background()
	for _, cache := range []string{"no cache", "load cache"} {
		t.Run(cache, func(t *testing.T) {
			for _, c := range []struct {
				name    string
				module  []byte
				memory  uint64
				timeout time.Duration
				want    string
			}{
				// Memory: a deadline no busy machine reaches first.
				{"locals 4e9", hostile.Locals(4_000_000_000), 256 << 20, time.Minute, "compiling the module needed more than 256 MiB; stopped"},
				{"locals 1e8", hostile.Locals(100_000_000), 256 << 20, time.Minute, "compiling the module needed more than 256 MiB; stopped"},
				// Time: 20,000 nested ifs take minutes (6 min in the old engine).
				{"nested ifs 20000", hostile.NestedIfs(20_000), 0, 3 * time.Second, "compiling the module took more than 3s; killed"},
			} {
				cfg := wasm.Config{Limits: noLimits, CompileMemoryBytes: c.memory, CompileTimeout: c.timeout}
				if cache == "no cache" {
					cfg.DisableCache = true
				} else {
					cfg.CacheDir = t.TempDir()
				}
				e, err := wasm.NewEngine(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				m, err := e.Compile(ctx, c.module, wasm.ModuleConfig{})
				if err == nil {
					m.Release()
					t.Fatalf("%s: compiled", c.name)
				}
				if !errors.Is(err, wasm.ErrCompile) || !errors.Is(err, wasm.ErrCompileBudget) || !strings.HasSuffix(err.Error(), c.want) {
					t.Fatalf("%s: %v, want ErrCompile, ErrCompileBudget and %q", c.name, err, c.want)
				}
				if d := time.Since(start); d > 90*time.Second {
					t.Fatalf("%s: failed after %s", c.name, d)
				}
				// The engine still compiles and runs a healthy module.
				m, err = e.Compile(ctx, hostile.Locals(10), wasm.ModuleConfig{})
				if err != nil {
					t.Fatal(err)
				}
				p, err := m.NewPool(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				p.Close(ctx)
				m.Release()
				_ = e.Close(ctx)
			}
		})
	}
}

// TestCompileInChildReportsWazeroErrors: a module wazero refuses fails
// with wazero's message, as an in-process compile does.
func TestCompileInChildReportsWazeroErrors(t *testing.T) {
	// __guest_call returns nothing though its type says i32.
	bad := hostile.Module{GuestCall: []byte{0x0b}}.Bytes()
	for _, inProcess := range []bool{false, true} {
		e := newEngine(t, wasm.Config{CompileInProcess: inProcess})
		_, err := e.Compile(context.Background(), bad, wasm.ModuleConfig{})
		if !errors.Is(err, wasm.ErrCompile) || errors.Is(err, wasm.ErrCompileBudget) || !strings.Contains(err.Error(), "function[0]") {
			t.Fatalf("in process %v: %v, want ErrCompile with wazero's message", inProcess, err)
		}
	}
}

// TestLoadCachedInChild: LoadCached (the WASI mode's way in) compiles in a
// compiler process too: over its budget a module fails with the reason,
// a healthy one loads cold and then warm, with and without a cache
// directory.
func TestLoadCachedInChild(t *testing.T) {
	ctx := context.Background()
	compile := func(ctx context.Context, code []byte, cache wazero.CompilationCache) (wazero.CompiledModule, func(), error) {
		rt := wazero.NewRuntimeWithConfig(ctx, wasm.NewRuntimeConfig(cache).WithCloseOnContextDone(true))
		cm, err := rt.CompileModule(ctx, code)
		if err != nil {
			_ = rt.Close(ctx)
			return nil, nil, err
		}
		return cm, func() { _ = rt.Close(ctx) }, nil
	}
	for _, cfg := range []wasm.Config{{CacheDir: t.TempDir()}, {DisableCache: true}} {
		cfg.Limits, cfg.CompileMemoryBytes = noLimits, 256<<20
		e, err := wasm.NewEngine(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, err = wasm.LoadCached(ctx, e, "test-locals", true, func() ([]byte, error) { return hostile.Locals(100_000_000), nil }, compile)
		if !errors.Is(err, wasm.ErrCompileBudget) || !strings.Contains(err.Error(), "needed more than 256 MiB") {
			t.Fatalf("cache %q: 1e8 locals: %v, want ErrCompileBudget", cfg.CacheDir, err)
		}
		for i, wantStubbed := range []bool{false, cfg.CacheDir != ""} {
			cm, cache, stubbed, err := wasm.LoadCached(ctx, e, "test-minimal", true, func() ([]byte, error) { return hostile.Minimal(), nil }, compile)
			if err != nil {
				t.Fatalf("cache %q: load %d: %v", cfg.CacheDir, i, err)
			}
			if stubbed != wantStubbed || len(cm.ExportedFunctions()) != 1 {
				t.Fatalf("cache %q: load %d: stubbed %v, exports %v", cfg.CacheDir, i, stubbed, cm.ExportedFunctions())
			}
			if cache != nil {
				_ = cache.Close(ctx)
			}
		}
		_ = e.Close(ctx)
	}
}
