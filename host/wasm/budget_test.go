package wasm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// TestMemoryBudget: pools of a module whose instances start with 1 MiB of
// linear memory load until the engine's budget (8 MiB) is reached; the
// next fails with ErrMemoryBudget and the reason, what was loaded keeps
// working, and closing a pool makes room again. The old engine loaded
// every one (2,000 policies of a standard-Go module: 4.86 GB).
func TestMemoryBudget(t *testing.T) {
	ctx := context.Background()
	const budget = 8 << 20
	e := newEngine(t, wasm.Config{MemoryBudgetBytes: budget})
	m, err := e.Compile(ctx, hostile.Module{MemoryPages: 16}.Bytes(), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	var pools []*wasm.Pool
	defer func() {
		for _, p := range pools {
			p.Close(ctx)
		}
	}()
	for i := 0; ; i++ {
		p, err := m.NewPool(ctx, 1)
		if err != nil {
			if !errors.Is(err, wasm.ErrMemoryBudget) || !strings.Contains(err.Error(), "the budget is 8 MiB") {
				t.Fatalf("pool %d: %v, want ErrMemoryBudget naming the budget", i, err)
			}
			if i < 5 || i > 8 {
				t.Fatalf("the budget stopped pool %d, want the 6th to 9th (1 MiB each)", i)
			}
			break
		}
		if i > 100 {
			t.Fatal("100 pools of 1 MiB loaded under a budget of 8 MiB")
		}
		pools = append(pools, p)
	}
	if used := e.MemoryBytes(); used > budget || used < budget/2 {
		t.Fatalf("MemoryBytes() = %d with the budget at %d", used, budget)
	}
	if _, err := pools[0].Call(ctx, 0, "op", nil); err == nil || errors.Is(err, wasm.ErrMemoryBudget) {
		t.Fatalf("a loaded pool: %v, want its guest's failure (it returns 0)", err)
	}
	pools[0].Close(ctx)
	pools = pools[1:]
	p, err := m.NewPool(ctx, 1)
	if err != nil {
		t.Fatalf("after closing a pool: %v", err)
	}
	pools = append(pools, p)
}

// TestMemoryBudgetCountsCode: a module's machine code counts against the
// budget when it is compiled.
func TestMemoryBudgetCountsCode(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []wasm.Config{{DisableCache: true}, {CacheDir: t.TempDir()}} {
		cfg.MemoryBudgetBytes = 64 << 10
		e, err := wasm.NewEngine(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// 2,000 functions compile to more than 64 KiB of machine code.
		if _, err := e.Compile(ctx, hostile.Functions(2000), wasm.ModuleConfig{}); !errors.Is(err, wasm.ErrMemoryBudget) {
			t.Fatalf("cache dir %q: %v, want ErrMemoryBudget", cfg.CacheDir, err)
		}
		if e.MemoryBytes() != 0 {
			t.Fatalf("MemoryBytes() = %d after the refusal", e.MemoryBytes())
		}
		m, err := e.Compile(ctx, hostile.Minimal(), wasm.ModuleConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if e.MemoryBytes() <= 0 {
			t.Fatal("a compiled module counts nothing")
		}
		m.Release()
		if e.MemoryBytes() != 0 {
			t.Fatalf("MemoryBytes() = %d after the release", e.MemoryBytes())
		}
		_ = e.Close(ctx)
	}
}
