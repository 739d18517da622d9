package opa_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// TestCompileThroughEngine: with Config.Engine, an OPA module is compiled as
// every other policy's module is, in the engine's compiler process (its time
// and memory budget), into its load cache: the first load compiles, the next
// one (a new engine on the same cache directory, as after a restart) starts
// from the cache, and both answer exactly as a module compiled in process.
func TestCompileThroughEngine(t *testing.T) {
	ctx := context.Background()
	input := `{"request":` + string(testfixture.File(t, opaExample+"/testdata/pod-missing-owner.json")) + `}`
	want := eval(t, compile(t, opaExample, opa.Config{}), input)
	dir := t.TempDir()
	for _, run := range []string{"cold", "warm"} {
		e, err := wasm.NewEngine(ctx, wasm.Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m, err := opa.Compile(ctx, e.CompilationCache(), testfixture.Module(t, opaExample), opa.Config{Engine: e})
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		if got := eval(t, m, input); got != want {
			t.Errorf("%s: %s, want %s (compiled in process)", run, got, want)
		}
		if m.FromLoadCache() != (run == "warm") {
			t.Errorf("%s: loaded from the load cache: %v", run, m.FromLoadCache())
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_ = e.Close(ctx)
	}
}

// TestCompileOverBudgetFailsAlone: an OPA-shaped module that takes the
// compiler minutes (20,000 nested ifs, with the structural limits lifted)
// fails at the engine's compile budget with the reason, in the engine's
// compiler process, instead of compiling for minutes in the server's
// process with no budget, as OPA modules did before they went through the
// engine.
func TestCompileOverBudgetFailsAlone(t *testing.T) {
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{DisableCache: true, CompileTimeout: 3 * time.Second,
		Limits: wasm.Limits{Locals: 1<<32 - 1, Nesting: 1<<32 - 1, BodyBytes: 1<<32 - 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	code := hostile.Module{OPA: true, Body: hostile.NestedIfsBody(20_000)}.Bytes()
	start := time.Now()
	_, err = opa.Compile(ctx, e.CompilationCache(), code, opa.Config{Engine: e})
	if !errors.Is(err, wasm.ErrCompileBudget) || !strings.Contains(err.Error(), "compiling the module took more than 3s; killed") {
		t.Fatalf("%v, want the compile budget's error", err)
	}
	t.Logf("failed %v after the compile began: %v", time.Since(start).Round(time.Millisecond), err)
	// The default limits refuse it before any compile.
	if _, err := opa.Compile(ctx, nil, code, opa.Config{}); !errors.Is(err, wasm.ErrLimit) {
		t.Fatalf("default limits: %v, want ErrLimit", err)
	}
}
