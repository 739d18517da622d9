package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestMemoryBudgetEveryMode: the host's memory budget
// (--policies-memory-budget) counts the policies of every execution mode,
// not only waPC's: one policy of each mode counts something against it, and
// with a budget of about two and a half policies, loading more fails the
// policy that does not fit with ErrMemoryBudget and the reason, while those
// loaded stay; closing them makes room for it again.
func TestMemoryBudgetEveryMode(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		mode     string
		dir      string
		settings string
	}{
		{"kubewarden-wapc", "examples/required-labels", `{"mandatory_labels":["app"]}`},
		{"wasi", "examples/wasi-required-labels", `{"required_labels":["app"]}`},
		{"opa", opaExample, `{"labels":["app"]}`},
		{"gatekeeper", gatekeeperExample, `{"registries":["registry.example.com/"]}`},
	} {
		t.Run(c.mode, func(t *testing.T) {
			mod := testfixture.Module(t, c.dir)
			cache := t.TempDir()
			// Each policy its own memory limit: waPC policies then compile a
			// module each, as WASI and Rego policies always do.
			spec := func(i int) policy.Spec {
				return policy.Spec{ID: fmt.Sprintf("%s-%d", c.mode, i), Module: mod, ExecutionMode: c.mode,
					Settings: json.RawMessage(c.settings), PoolSize: 2, MemoryLimitBytes: 64<<20 + uint64(i)<<16}
			}
			// What one policy counts, on a host with room for it.
			h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: cache, MemoryBudgetBytes: 8 << 30})
			if err != nil {
				t.Fatal(err)
			}
			p, err := h.Load(ctx, spec(0))
			if err != nil {
				t.Fatal(err)
			}
			one := h.MemoryBytes()
			if one <= 0 {
				t.Fatalf("one %s policy counts %d bytes against the memory budget", c.mode, one)
			}
			p.Close(ctx)
			if got := h.MemoryBytes(); got != 0 {
				t.Fatalf("after its policy closed, %d bytes still count against the budget", got)
			}
			_ = h.Close(ctx)

			budget := uint64(one) * 5 / 2
			h, err = policy.NewHost(ctx, policy.HostOptions{CacheDir: cache, MemoryBudgetBytes: budget})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(ctx)
			var loaded []*policy.Policy
			var refused error
			failed := -1
			for i := range 6 {
				p, err := h.Load(ctx, spec(i))
				if err != nil {
					refused, failed = err, i
					break
				}
				loaded = append(loaded, p)
			}
			if failed < 0 {
				t.Fatalf("6 %s policies of about %d bytes each loaded under a budget of %d bytes", c.mode, one, budget)
			}
			if len(loaded) == 0 || !errors.Is(refused, wasm.ErrMemoryBudget) ||
				!strings.Contains(refused.Error(), spec(failed).ID) || !strings.Contains(refused.Error(), fmt.Sprintf("the budget is %d MiB", budget>>20)) {
				t.Fatalf("after %d policies: %v; want ErrMemoryBudget naming the policy and the budget", len(loaded), refused)
			}
			t.Logf("one %s policy counts %d bytes; %d loaded under a budget of %d, then: %v", c.mode, one, len(loaded), budget, refused)
			if used := h.MemoryBytes(); used > int64(budget) || used <= 0 {
				t.Fatalf("%d policies loaded hold %d bytes against a budget of %d", len(loaded), used, budget)
			}
			for _, p := range loaded {
				p.Close(ctx)
			}
			p, err = h.Load(ctx, spec(failed))
			if err != nil {
				t.Fatalf("once the others closed: %v", err)
			}
			p.Close(ctx)
		})
	}
}
