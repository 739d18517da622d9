package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const podRequest = `{"uid":"req-1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
"operation":"CREATE","namespace":"default","name":"nginx","userInfo":{"username":"alice"},
"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default","labels":{"app":"web"}},
"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}}`

func newHost(t *testing.T) (*policy.Host, *testfixture.SyncBuffer) {
	t.Helper()
	logs := &testfixture.SyncBuffer{}
	h, err := policy.NewHost(context.Background(), policy.HostOptions{
		CacheDir: t.TempDir(),
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h, logs
}

func load(t *testing.T, h *policy.Host, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := h.Load(context.Background(), s)
	if err != nil {
		t.Fatalf("load %s: %v", s.ID, err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func misbehave(t *testing.T, h *policy.Host, behaviour string, extra map[string]any) *policy.Policy {
	return misbehaveWith(t, h, behaviour, extra, 500*time.Millisecond, 32<<20)
}

func misbehaveWith(t *testing.T, h *policy.Host, behaviour string, extra map[string]any, timeout time.Duration, memLimit uint64) *policy.Policy {
	settings := map[string]any{"behaviour": behaviour}
	for k, v := range extra {
		settings[k] = v
	}
	b, _ := json.Marshal(settings)
	return load(t, h, policy.Spec{
		ID: "misbehave-" + behaviour, Module: testfixture.Module(t, "test/testdata/policies/misbehave"),
		Settings: b, Timeout: timeout, MemoryLimitBytes: memLimit, PoolSize: 2,
	})
}

// assertStillServes checks that a policy whose instance was just thrown away
// answers again and that its pool holds no more instances than its size.
func assertStillServes(t *testing.T, h *policy.Host) {
	t.Helper()
	p := misbehave(t, h, "accept", nil)
	for i := 0; i < 3; i++ {
		res, err := p.Validate(context.Background(), []byte(podRequest))
		if err != nil || !res.Response.Accepted {
			t.Fatalf("after a failure the host must keep serving: %v %+v", err, res)
		}
	}
}

// TestModuleKinds runs one request through each kind of module the ecosystem
// produces: TinyGo -target=wasi (Kubewarden's build, _start ends in
// proc_exit(0)), TinyGo wasi-legacy, and a standard-Go wasip1 reactor.
func TestModuleKinds(t *testing.T) {
	h, _ := newHost(t)
	for _, tc := range []struct {
		kind, dir, settings string
	}{
		{"tinygo -target=wasi", "examples/capabilities-drop", ``},
		{"tinygo wasi-legacy", "test/testdata/policies/misbehave", `{"behaviour":"accept"}`},
		{"standard Go wasip1 reactor", "examples/go-image-registries", `{"allowedRegistries":["docker.io"]}`},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			p := load(t, h, policy.Spec{ID: tc.dir, Module: testfixture.Module(t, tc.dir), Settings: json.RawMessage(tc.settings)})
			res, err := p.Validate(context.Background(), []byte(podRequest))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Response.Accepted {
				t.Fatalf("want accepted, got %+v", res.Response)
			}
		})
	}
}

func TestBadModules(t *testing.T) {
	h, _ := newHost(t)
	ctx := context.Background()
	_, err := h.Load(ctx, policy.Spec{ID: "text", Module: testfixture.File(t, "test/testdata/policies/not-wasm.wasm")})
	if !errors.Is(err, wasm.ErrNotWasm) || !strings.Contains(err.Error(), "policy text") {
		t.Fatalf("not wasm: want ErrNotWasm naming the policy, got %v", err)
	}
	// A Wasm module that is not a waPC guest.
	_, err = h.Load(ctx, policy.Spec{ID: "plain", Module: []byte("\x00asm\x01\x00\x00\x00")})
	if !errors.Is(err, wasm.ErrNotWapc) {
		t.Fatalf("plain module: want ErrNotWapc, got %v", err)
	}
	// A waPC guest that registered no validate operation.
	p := load(t, h, policy.Spec{ID: "no-validate", Module: testfixture.Module(t, "test/testdata/policies/no-validate")})
	_, err = p.Validate(ctx, []byte(podRequest))
	if !errors.Is(err, wasm.ErrGuest) || !strings.Contains(err.Error(), "validate") {
		t.Fatalf("no validate: want a guest error naming validate, got %v", err)
	}
}

func TestSettings(t *testing.T) {
	h, _ := newHost(t)
	ctx := context.Background()
	mod := testfixture.Module(t, "test/testdata/policies/misbehave")
	_, err := h.Load(ctx, policy.Spec{ID: "bad", Module: mod, Settings: json.RawMessage(`{"behaviour":"dance"}`)})
	if !errors.Is(err, policy.ErrInvalidSettings) || !strings.Contains(err.Error(), "dance") {
		t.Fatalf("want the policy's own message naming the value, got %v", err)
	}
	_, err = h.Load(ctx, policy.Spec{ID: "list", Module: mod, Settings: json.RawMessage(`[1]`)})
	if !errors.Is(err, policy.ErrSettingsNotObject) {
		t.Fatalf("want ErrSettingsNotObject, got %v", err)
	}
	_, err = h.Load(ctx, policy.Spec{ID: "broken", Module: mod, Settings: json.RawMessage(`{"behaviour":`)})
	if !errors.Is(err, admission.ErrBadJSON) {
		t.Fatalf("want ErrBadJSON, got %v", err)
	}
	for _, s := range []string{``, `null`, `{}`, ` { } `} {
		got, err := policy.NormalizeSettings(json.RawMessage(s))
		if err != nil || string(got) != `{}` {
			t.Fatalf("settings %q: want {}, got %s %v", s, got, err)
		}
	}
}

func TestMisbehavingPolicies(t *testing.T) {
	h, _ := newHost(t)
	ctx := context.Background()
	const mib = 1 << 20
	tests := []struct {
		behaviour string
		timeout   time.Duration
		memLimit  uint64
		want      error
		text      string
		within    time.Duration
	}{
		{"trap", time.Second, 32 * mib, wasm.ErrTrap, "", 2 * time.Second},
		{"loop", 500 * time.Millisecond, 32 * mib, wasm.ErrTimeout, "500ms", 2 * time.Second},
		// Generous deadline: the memory cap, not the clock, must stop it.
		{"oom", 20 * time.Second, 16 * mib, wasm.ErrMemoryLimit, "16777216", 20 * time.Second},
		{"invalid-json", time.Second, 32 * mib, policy.ErrInvalidResponse, "not a ValidationResponse", time.Second},
		{"mutate-non-object", time.Second, 32 * mib, policy.ErrInvalidResponse, "mutated_object must be a JSON object", time.Second},
		// Enough memory for the 50 MB answer: the host's answer limit (16 MiB) must stop it.
		{"huge-output", 30 * time.Second, 256 * mib, policy.ErrInvalidResponse, "the limit is 16777216", 30 * time.Second},
		// The same answer under a 32 MiB cap: the memory cap stops it first.
		{"huge-output", 10 * time.Second, 32 * mib, wasm.ErrMemoryLimit, "33554432", 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/mem=%dMiB", tt.behaviour, tt.memLimit/mib), func(t *testing.T) {
			p := misbehaveWith(t, h, tt.behaviour, nil, tt.timeout, tt.memLimit)
			rounds := 3 // a broken instance is replaced every time
			if tt.behaviour == "huge-output" {
				rounds = 1 // each round moves 50 MB through the guest's heap: slow under -race
			}
			for round := 0; round < rounds; round++ {
				start := time.Now()
				_, err := p.Validate(ctx, []byte(podRequest))
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("round %d: want %v containing %q, got %v", round, tt.want, tt.text, err)
				}
				if d := time.Since(start); d > tt.within {
					t.Fatalf("round %d: answered after %s, want within %s", round, d, tt.within)
				}
				if live, size := p.Instances(); live > size {
					t.Fatalf("instance leak: %d live, pool of %d", live, size)
				}
			}
			assertStillServes(t, h)
		})
	}
}

func TestHostCalls(t *testing.T) {
	h, logs := newHost(t)
	ctx := context.Background()

	t.Run("log goes to the structured log with the policy id", func(t *testing.T) {
		p := misbehave(t, h, "log", nil)
		if _, err := p.Validate(ctx, []byte(podRequest)); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), `"policy":"misbehave-log"`) {
			t.Fatalf("policy log line missing or without policy id:\n%s", logs)
		}
	})
	t.Run("unknown capability gets a clear error answer", func(t *testing.T) {
		p := misbehave(t, h, "hostcall", map[string]any{"namespace": "kubernetes", "operation": "get_resource", "payload": "{}"})
		res, err := p.Validate(ctx, []byte(podRequest))
		if err != nil {
			t.Fatal(err)
		}
		msg := ""
		if res.Response.Message != nil {
			msg = *res.Response.Message
		}
		if !strings.Contains(msg, "kubewarden/kubernetes/get_resource is not available") {
			t.Fatalf("want the host's error passed to the guest, got %q", msg)
		}
	})
	t.Run("a blocking host call is cut at the deadline", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		p := load(t, h, policy.Spec{
			ID: "blocked", Module: testfixture.Module(t, "test/testdata/policies/misbehave"),
			Settings: json.RawMessage(`{"behaviour":"hostcall","namespace":"net","operation":"v1/dns_lookup_host","payload":"\"example.com\""}`),
			Timeout:  300 * time.Millisecond,
			HostCalls: func(context.Context, string, string, string, []byte) ([]byte, error) {
				<-release // ignores its context on purpose
				return nil, nil
			},
		})
		start := time.Now()
		_, err := p.Validate(ctx, []byte(podRequest))
		if !errors.Is(err, wasm.ErrTimeout) {
			t.Fatalf("want ErrTimeout, got %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("blocked host call held the request for %s", d)
		}
	})
}

func TestParallelEvaluations(t *testing.T) {
	h, _ := newHost(t)
	p := load(t, h, policy.Spec{ID: "caps", Module: testfixture.Module(t, "examples/capabilities-drop"), PoolSize: 2})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				res, err := p.Validate(context.Background(), []byte(podRequest))
				if err != nil || !res.Response.Accepted {
					errs <- fmt.Errorf("%v %+v", err, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if live, size := p.Instances(); live > size || size != 2 {
		t.Fatalf("pool: %d live of %d", live, size)
	}
}

func TestModulesAreCompiledOncePerDigest(t *testing.T) {
	h, _ := newHost(t)
	mod := testfixture.Module(t, "test/testdata/policies/misbehave")
	for i := 0; i < 3; i++ {
		load(t, h, policy.Spec{ID: fmt.Sprint("p", i), Module: mod, Settings: json.RawMessage(`{"behaviour":"accept"}`)})
	}
	if n := h.Modules(); n != 1 {
		t.Fatalf("3 policies with one module: want 1 compiled module, got %d", n)
	}
	load(t, h, policy.Spec{ID: "other-limit", Module: mod, Settings: json.RawMessage(`{"behaviour":"accept"}`), MemoryLimitBytes: 64 << 20})
	if n := h.Modules(); n != 2 {
		t.Fatalf("a different memory cap is a different compiled module: want 2, got %d", n)
	}
}

func TestRawPolicyRejectsAdmissionEndpoint(t *testing.T) {
	h, _ := newHost(t)
	p := load(t, h, policy.Spec{ID: "raw", Module: testfixture.Module(t, "examples/raw-validation"),
		Settings: json.RawMessage(testfixture.File(t, "examples/raw-validation/testdata/settings.json"))})
	if _, err := p.Validate(context.Background(), []byte(podRequest)); !errors.Is(err, policy.ErrWrongPolicyType) {
		t.Fatalf("want ErrWrongPolicyType, got %v", err)
	}
}
