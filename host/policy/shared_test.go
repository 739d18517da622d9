package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// loadShared loads the misbehave module with the given settings, drawing its
// instances from the pool shared by all such policies (Spec.ShareInstances).
// The misbehave guest keeps nothing between calls: it reads its behaviour
// from the settings of each call, as a settings-keyed module does. The
// caller closes the policy.
func loadShared(t *testing.T, h *policy.Host, id string, settings map[string]any, hc wasm.HostCallHandler, timeout time.Duration) *policy.Policy {
	t.Helper()
	b, _ := json.Marshal(settings)
	p, err := h.Load(context.Background(), policy.Spec{
		ID: id, Module: testfixture.Module(t, "test/testdata/policies/misbehave"), Settings: b,
		Timeout: timeout, PoolSize: 2, HostCalls: hc, HostCallsInline: hc != nil, ShareInstances: true,
	})
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	if !p.SharesInstances() {
		t.Fatalf("%s: SharesInstances false with Spec.ShareInstances", id)
	}
	return p
}

// answering is a host-call handler that answers every call with its name,
// and counts the calls it got.
type answering struct {
	name  string
	mu    sync.Mutex
	calls int
}

func (a *answering) handle(_ context.Context, _, _, _ string, _ []byte) ([]byte, error) {
	a.mu.Lock()
	a.calls++
	a.mu.Unlock()
	return []byte(`"` + a.name + `"`), nil
}

func (a *answering) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

// TestSharedPoolPerPolicy runs policies of different settings through one
// shared pool of two instances, concurrently: each gets its own answer, its
// host calls go to its own handler, its logs name it, and a trap or deadline
// in one replaces an instance without failing the others' evaluations.
func TestSharedPoolPerPolicy(t *testing.T) {
	h, logs := newHost(t)
	ctx := context.Background()
	hostcall := map[string]any{"behaviour": "hostcall", "namespace": "kubernetes", "operation": "get_resource", "payload": "{}", "repeat": 3}
	accept := loadShared(t, h, "accept", map[string]any{"behaviour": "accept"}, nil, 0)
	handlerA, handlerB := &answering{name: "answer-for-a"}, &answering{name: "answer-for-b"}
	callsA := loadShared(t, h, "calls-a", hostcall, handlerA.handle, 0)
	callsB := loadShared(t, h, "calls-b", hostcall, handlerB.handle, 0)
	logger := loadShared(t, h, "logger", map[string]any{"behaviour": "log", "message": "from the logger policy"}, nil, 0)
	trap := loadShared(t, h, "trap", map[string]any{"behaviour": "trap"}, nil, 0)
	loop := loadShared(t, h, "loop", map[string]any{"behaviour": "loop"}, nil, 100*time.Millisecond)
	all := []*policy.Policy{accept, callsA, callsB, logger, trap, loop}
	defer func() {
		for _, p := range all {
			p.Close(ctx)
		}
	}()
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools, want 1", n)
	}
	if live, size := accept.Instances(); size != 2 || live > 2 {
		t.Fatalf("instances %d of %d, want at most 2 of 2 for six policies", live, size)
	}

	const rounds = 8
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	run := func(p *policy.Policy, check func(*policy.Result, error) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				res, err := p.Validate(ctx, []byte(podRequest))
				if cerr := check(res, err); cerr != nil {
					errs <- fmt.Errorf("%s, evaluation %d: %w", p.ID(), i, cerr)
					return
				}
			}
		}()
	}
	accepted := func(msg string) func(*policy.Result, error) error {
		return func(res *policy.Result, err error) error {
			if err != nil {
				return err
			}
			got := ""
			if res.Response.Message != nil {
				got = *res.Response.Message
			}
			if !res.Response.Accepted || got != msg {
				return fmt.Errorf("accepted %v, message %q; want accepted with %q", res.Response.Accepted, got, msg)
			}
			return nil
		}
	}
	failed := func(want error, id string) func(*policy.Result, error) error {
		return func(_ *policy.Result, err error) error {
			if !errors.Is(err, want) || !strings.Contains(err.Error(), "policy "+id+":") {
				return fmt.Errorf("error %v, want %v naming policy %s", err, want, id)
			}
			return nil
		}
	}
	run(accept, accepted(""))
	run(callsA, accepted(`host answered: "answer-for-a"`))
	run(callsB, accepted(`host answered: "answer-for-b"`))
	run(logger, accepted(""))
	run(trap, failed(wasm.ErrTrap, "trap"))
	run(loop, failed(wasm.ErrTimeout, "loop"))
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if a, b := handlerA.count(), handlerB.count(); a != 3*rounds || b != 3*rounds {
		t.Errorf("host calls: %d to calls-a's handler, %d to calls-b's; want %d each", a, b, 3*rounds)
	}
	var logged int
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "from the logger policy") {
			logged++
			if !strings.Contains(line, `"policy":"logger"`) {
				t.Errorf("log line not attributed to policy logger: %s", line)
			}
		}
	}
	if logged != rounds {
		t.Errorf("%d log lines of the logger policy, want %d", logged, rounds)
	}
	if live, size := accept.Instances(); size != 2 || live > 2 {
		t.Fatalf("instances %d of %d after the traps, want at most 2 of 2", live, size)
	}
}

// TestSharedPoolLifetime checks that the shared pool lives while any of its
// policies does: closing one (twice) leaves the others working, a policy
// loaded later joins it, closing the last releases the pool and the module;
// policies without ShareInstances, or of another pool size or share group,
// get pools of their own.
func TestSharedPoolLifetime(t *testing.T) {
	h, _ := newHost(t)
	ctx := context.Background()
	accepts := func(p *policy.Policy) {
		t.Helper()
		res, err := p.Validate(ctx, []byte(podRequest))
		if err != nil || !res.Response.Accepted {
			t.Fatalf("%s: %+v %v", p.ID(), res, err)
		}
	}
	a := loadShared(t, h, "a", map[string]any{"behaviour": "accept"}, nil, 0)
	b := loadShared(t, h, "b", map[string]any{"behaviour": "log"}, nil, 0)
	own := load(t, h, policy.Spec{ID: "own", Module: testfixture.Module(t, "test/testdata/policies/misbehave"), PoolSize: 2})
	if own.SharesInstances() {
		t.Fatal("a policy without ShareInstances shares instances")
	}
	other, err := h.Load(ctx, policy.Spec{ID: "other-size", Module: testfixture.Module(t, "test/testdata/policies/misbehave"), PoolSize: 3, ShareInstances: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := h.SharedPools(); n != 2 {
		t.Fatalf("%d shared pools, want 2 (pool sizes 2 and 3)", n)
	}
	grouped, err := h.Load(ctx, policy.Spec{ID: "other-group", Module: testfixture.Module(t, "test/testdata/policies/misbehave"), PoolSize: 2, ShareInstances: true, ShareGroup: "v1/ConfigMap,"})
	if err != nil {
		t.Fatal(err)
	}
	if n := h.SharedPools(); n != 3 {
		t.Fatalf("%d shared pools, want 3 (share groups \"\" and \"v1/ConfigMap,\")", n)
	}
	other.Close(ctx)
	grouped.Close(ctx)
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools after closing the only policies of size 3 and of another group, want 1", n)
	}

	a.Close(ctx)
	a.Close(ctx) // a second Close must not give back another policy's place
	accepts(b)
	c := loadShared(t, h, "c", map[string]any{"behaviour": "accept"}, nil, 0)
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools, want 1", n)
	}
	b.Close(ctx)
	accepts(c)
	c.Close(ctx)
	if n := h.SharedPools(); n != 0 {
		t.Fatalf("%d shared pools after closing all their policies, want 0", n)
	}
	accepts(own)
	own.Close(ctx)
	if n := h.Modules(); n != 0 {
		t.Fatalf("%d modules after closing every policy, want 0", n)
	}
	// A new policy after all were closed starts a new pool.
	d := loadShared(t, h, "d", map[string]any{"behaviour": "accept"}, nil, 0)
	accepts(d)
	d.Close(ctx)
	if n := h.SharedPools(); n != 0 {
		t.Fatalf("%d shared pools, want 0", n)
	}
}

// TestSharedPoolSettingsValidatedPerPolicy checks that each policy's
// settings are validated at load even when its pool already exists: bad
// settings fail that policy's load, naming it, and leave the pool to the
// others.
func TestSharedPoolSettingsValidatedPerPolicy(t *testing.T) {
	h, _ := newHost(t)
	ctx := context.Background()
	good := loadShared(t, h, "good", map[string]any{"behaviour": "accept"}, nil, 0)
	defer good.Close(ctx)
	_, err := h.Load(ctx, policy.Spec{
		ID: "bad", Module: testfixture.Module(t, "test/testdata/policies/misbehave"),
		Settings: json.RawMessage(`{"behaviour":"nonsense"}`), PoolSize: 2, ShareInstances: true,
	})
	if !errors.Is(err, policy.ErrInvalidSettings) || !strings.Contains(err.Error(), "policy bad:") {
		t.Fatalf("bad settings: %v", err)
	}
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools, want 1", n)
	}
	if res, err := good.Validate(ctx, []byte(podRequest)); err != nil || !res.Response.Accepted {
		t.Fatalf("good after bad's failed load: %+v %v", res, err)
	}
}
