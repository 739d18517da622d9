package wasm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// startWithin starts a pool of mod with the given context and config, and
// fails the test if that has not returned within ceiling (a start that
// never returns is left behind on its goroutine: the old engine's).
func startWithin(t *testing.T, ctx context.Context, m *wasm.Module, pc wasm.PoolConfig, ceiling time.Duration) (time.Duration, error) {
	t.Helper()
	type result struct {
		p   *wasm.Pool
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		p, err := m.NewPoolConfig(ctx, pc)
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		if r.p != nil {
			r.p.Close(context.Background())
		}
		return time.Since(start), r.err
	case <-time.After(ceiling):
		t.Fatalf("the start of the instance did not return within %s", ceiling)
		return 0, nil
	}
}

// TestStartFunctionLoopStops: a module whose `start` section function (or
// exported `_initialize`) loops fails to start at the deadline, with
// ErrInstantiate and ErrTimeout, instrumented or not, whether the deadline
// is the context's or the pool's StartTimeout. The old engine never
// returned from the start section of StartLoop (wazero runs it inside
// InstantiateModule, before the host could reach the interrupt global):
// checked, the "deadline of the context" case failed on its 30 s ceiling.
func TestStartFunctionLoopStops(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  wasm.Config
	}{
		{"instrumented", wasm.Config{}},
		{"uninstrumented", wasm.Config{DisableInstrumentation: true}},
	} {
		for _, mod := range []struct {
			name string
			b    []byte
		}{
			{"start section", hostile.StartLoop()},
			{"_initialize", hostile.InitializeLoop()},
		} {
			t.Run(mode.name+"/"+mod.name, func(t *testing.T) {
				e := newEngine(t, mode.cfg)
				m, err := e.Compile(context.Background(), mod.b, wasm.ModuleConfig{})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Release()
				if got, want := m.Interruptible(), mode.cfg.DisableInstrumentation == false; got != want {
					t.Fatalf("Interruptible() = %v, want %v", got, want)
				}

				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				took, err := startWithin(t, ctx, m, wasm.PoolConfig{Size: 1}, 30*time.Second)
				if !errors.Is(err, wasm.ErrInstantiate) || !errors.Is(err, wasm.ErrTimeout) {
					t.Fatalf("deadline of the context: %v, want ErrInstantiate and ErrTimeout", err)
				}
				if took > 5*time.Second {
					t.Fatalf("deadline of the context: stopped after %s, want about 200ms", took)
				}

				took, err = startWithin(t, context.Background(), m, wasm.PoolConfig{Size: 1, StartTimeout: 300 * time.Millisecond}, 30*time.Second)
				if !errors.Is(err, wasm.ErrInstantiate) || !errors.Is(err, wasm.ErrTimeout) {
					t.Fatalf("StartTimeout: %v, want ErrInstantiate and ErrTimeout", err)
				}
				if took > 5*time.Second {
					t.Fatalf("StartTimeout: stopped after %s, want about 300ms", took)
				}
			})
		}
	}
}

// TestStartFunctionRuns: the start section's function still runs, once,
// before `__guest_call`: it adds 1 at address 0, which `__guest_call`
// returns, and waPC takes 1 (only) for success.
func TestStartFunctionRuns(t *testing.T) {
	mod := hostile.Module{
		// i32.const 0; i32.const 0; i32.load; i32.const 1; i32.add; i32.store
		Body:      []byte{0x41, 0x00, 0x41, 0x00, 0x28, 0x02, 0x00, 0x41, 0x01, 0x6a, 0x36, 0x02, 0x00, 0x0b},
		Start:     true,
		GuestCall: []byte{0x41, 0x00, 0x28, 0x02, 0x00, 0x0b}, // i32.const 0; i32.load
	}.Bytes()
	for _, cfg := range []wasm.Config{{}, {DisableInstrumentation: true}} {
		e := newEngine(t, cfg)
		m, err := e.Compile(context.Background(), mod, wasm.ModuleConfig{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.NewPool(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err = p.Call(context.Background(), time.Second, "op", nil); err != nil {
			t.Fatalf("instrumented %v: %v (the start function did not run exactly once)", m.Interruptible(), err)
		}
		p.Close(context.Background())
		m.Release()
	}
}
