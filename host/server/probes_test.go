package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// gatedLoader is a testLoader whose load of the policies in gates waits until
// their gate is closed (a compilation that takes long), saying on started
// that it began.
type gatedLoader struct {
	*testLoader
	gates   map[string]chan struct{}
	started chan string
}

func (l *gatedLoader) Load(ctx context.Context, spec policy.Spec) (Evaluator, error) {
	if g, ok := l.gates[spec.ID]; ok {
		l.started <- spec.ID
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.testLoader.Load(ctx, spec)
}

// eventually polls f until it returns "" (ok) or fails the test after a minute with f's last
// answer. The ceiling is generous: it waits for an event, and only a failing test reaches it
// (10 s ran out once for TestProbesAnswerWhileLoading at load 17-28).
func eventually(t *testing.T, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProbesAnswerWhileLoading: the probe port answers while a policy's load is slow (as a
// cold compilation of a big module is): /livez 200, /readiness 503 saying how many policies
// are still loading, /policies and /metrics with the progress; once every policy loaded (or
// failed) and the webhook port serves, /readiness is 200. Before, the port opened only after
// the load, and a kubelet's liveness probe killed the container mid-compilation.
func TestProbesAnswerWhileLoading(t *testing.T) {
	release := make(chan struct{})
	l := &gatedLoader{testLoader: acceptAll(t), gates: map[string]chan struct{}{"slow": release, "grp/b": release}, started: make(chan string, 2)}
	file := `
fast:
  module: script://ok
slow:
  module: script://ok
broken:
  module: /nonexistent/policy.wasm
grp:
  expression: "a() && b()"
  policies:
    a: {module: script://ok}
    b: {module: script://ok}
`
	h := openProbing(t, harnessOpts{policies: file, loader: l})
	srv := h.srv
	// The server loads max(2, GOMAXPROCS) policies at a time. On two cores the two gated loads
	// could take both slots before fast and broken had one, and then nothing else loaded until
	// the gates opened (the test failed 6 times in a row at load 20): four slots leave room.
	srv.runner.slots = make(chan struct{}, 4)
	loaded := make(chan error, 1)
	go func() {
		err := srv.Load(context.Background())
		if err == nil {
			err = srv.Start(context.Background())
		}
		loaded <- err
	}()
	for range 2 {
		<-l.started
	}

	if code, body := h.get("/livez"); code != 200 || body != "ok\n" {
		t.Fatalf("/livez while loading: %d %q, want 200", code, body)
	}
	eventually(t, "/readiness while loading", func() string {
		if code, body := h.get("/readiness"); code != 503 || body != "loading: 2 of 4 policies\n" {
			return fmt.Sprintf("HTTP %d %q", code, body)
		}
		return ""
	})
	pl := h.policies()
	states := map[string]string{}
	for _, p := range pl.Policies {
		states[p.ID] = p.State
	}
	if pl.Generation != 1 || pl.ConfigDigest != status.Digest([]byte(file)) || len(pl.Policies) != 4 ||
		states["fast"] != status.StateReady || states["broken"] != status.StateFailed ||
		states["slow"] != status.StateLoading || states["grp"] != status.StateLoading {
		b, _ := json.Marshal(pl)
		t.Fatalf("/policies while loading: %s", b)
	}
	if err := pl.Serves(status.Digest([]byte(file)), "slow"); err == nil || !strings.Contains(err.Error(), "still loading") {
		t.Errorf("Serves(slow) while loading: %v", err)
	}
	code, metrics := h.get("/metrics")
	for _, want := range []string{"tollgate_config_policies_loading 2\n", "tollgate_config_generation 1\n"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics while loading (HTTP %d) lacks %q", code, want)
		}
	}
	select {
	case err := <-loaded:
		t.Fatalf("the load ended before the slow policies loaded: %v", err)
	default:
	}

	close(release)
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if code, body := h.get("/readiness"); code != 200 || body != "ok\n" {
		t.Fatalf("/readiness after the load: %d %q", code, body)
	}
	if code, _ := h.get("/livez"); code != 200 {
		t.Fatalf("/livez after the load: %d", code)
	}
	if p := h.policy("slow"); p.State != status.StateReady {
		t.Errorf("slow after the load: %+v", p)
	}
	if pl := h.policies(); pl.Generation != 1 || pl.LastReload.Trigger != "start" {
		t.Errorf("/policies after the load: generation %d, last reload %+v", pl.Generation, pl.LastReload)
	}
	if _, metrics := h.get("/metrics"); !strings.Contains(metrics, "tollgate_config_policies_loading 0\n") {
		t.Error("/metrics after the load: tollgate_config_policies_loading is not 0")
	}
}

// TestLivezFailsWhenBroken: /livez fails once the server is broken: the webhook's serving
// loop died (its listener closed under it), or a --strict load failed. Before, /livez
// answered 200 whatever happened.
func TestLivezFailsWhenBroken(t *testing.T) {
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t)})
	if code, _ := h.get("/livez"); code != 200 {
		t.Fatalf("/livez %d while serving", code)
	}
	h.srv.hookLn.Close()
	eventually(t, "/livez after the webhook listener closed", func() string {
		if code, body := h.get("/livez"); code != 503 || !strings.Contains(body, "the webhook server stopped") {
			return fmt.Sprintf("HTTP %d %q", code, body)
		}
		return ""
	})
	if code, body := h.get("/readiness"); code != 503 || !strings.Contains(body, "broken") {
		t.Errorf("/readiness %d %q with the webhook server stopped", code, body)
	}

	cfg := &config.Config{Options: config.Defaults(), Policies: []config.Policy{{ID: "bad", Module: "/nope.wasm", Settings: json.RawMessage("{}"), Mode: config.ModeProtect}}}
	cfg.Options.Strict = true
	cfg.Options.Addr, cfg.Options.ReadinessProbePort = "127.0.0.1", 0
	srv, err := Open(Options{Config: cfg, Loader: newTestLoader(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeProbes(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if err := srv.Load(context.Background()); err == nil {
		t.Fatal("a --strict load with a failed policy succeeded")
	}
	h.probeAt = "http://" + srv.ProbeAddr()
	if code, body := h.get("/livez"); code != 503 || !strings.Contains(body, "policy bad") {
		t.Errorf("/livez after a failed --strict load: %d %q", code, body)
	}
}
