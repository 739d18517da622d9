package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// TestServeHostileModules is issue 30's acceptance test, on the real binary with its default
// limits: a healthy policy beside a module declaring 100,000,000 locals, a module whose Wasm
// `start` function loops forever, and one of 50,000 nested blocks. The healthy policy answers
// within 30 s of start, the server's peak RSS stays under 1 GiB, each hostile policy is failed
// with its reason within 90 s, and SIGTERM ends the process within 40 s. Before: the locals
// took 2.6 GB while compiling, the looping start kept the webhook port closed and SIGTERM
// ignored, and the nested blocks took 66 s to compile.
func TestServeHostileModules(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	hostileModules := map[string][]byte{
		"locals":  hostile.Locals(100_000_000),
		"loop":    hostile.StartLoop(),
		"nesting": hostile.NestedBlocks(50_000),
	}
	policies := healthyPolicy
	for id, b := range hostileModules {
		policies += id + ":\n  module: " + writeModule(t, id+".wasm", b) + "\n"
	}
	p := startServeProcess(t, policies)
	took := p.until("healthy answers", 30*time.Second, func() string {
		if code, body := p.post("healthy"); code != 200 || !strings.Contains(body, `\"owner\" is missing`) {
			return fmt.Sprintf("HTTP %d %.200s", code, body)
		}
		return ""
	})
	t.Logf("healthy answered %v after start", took)
	for id := range hostileModules {
		took := p.until(id+" failed", 90*time.Second, func() string {
			q, err := p.policy(id)
			if err != nil || q.State != status.StateFailed || q.Error == "" {
				return fmt.Sprintf("%+v %v", q, err)
			}
			return ""
		})
		q, _ := p.policy(id)
		t.Logf("%s failed %v later: %s", id, took, q.Error)
		if strings.Contains(q.Error, "--policy-load-timeout") { // the engine's own limit says why
			t.Errorf("%s: the reason is the load deadline's: %s", id, q.Error)
		}
	}
	if code, body := p.post("healthy"); code != 200 {
		t.Errorf("healthy after: HTTP %d %.200s", code, body)
	}
	peak := p.rssPeak()
	t.Logf("peak RSS %d MiB", peak>>20)
	if peak <= 0 || peak >= 1<<30 {
		t.Errorf("peak RSS %d bytes, want under 1 GiB", peak)
	}
	t.Logf("exited %v after SIGTERM", p.terminate(40*time.Second))
}
