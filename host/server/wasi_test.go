package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
)

// TestServeWasiPolicies serves executionMode wasi policies (standard-Go WASI
// commands, chosen by their metadata): the example accepts and rejects, and
// the misbehaving fixture's exit, trap, endless loop and oversized output are
// answered within the deadline, with Kubewarden's code 500.
func TestServeWasiPolicies(t *testing.T) {
	good := wasmPath(t, "examples/wasi-required-labels")
	bad := wasmPath(t, "test/testdata/policies/wasi-misbehave")
	pols := fmt.Sprintf(`
labels:
  module: %[1]s
  settings: {required_labels: [owner]}
mutate:
  module: %[2]s
  settings: {behaviour: mutate}
  allowedToMutate: true
fatal:
  module: %[2]s
  settings: {behaviour: fatal}
panic:
  module: %[2]s
  settings: {behaviour: panic}
loop:
  module: %[2]s
  settings: {behaviour: loop}
  timeoutEvalSeconds: 1
big:
  module: %[2]s
  settings: {behaviour: big}
garbage:
  module: %[2]s
  settings: {behaviour: garbage}
`, good, bad)
	h := start(t, harnessOpts{policies: pols, loader: newTestLoader(t), options: func(o *config.Options) {
		o.Workers = 2
		// Far above what any case takes: a case that ran into it would answer "timed out" after
		// 30 s, which the ceilings below tell apart from its own answer. (At 2 s, "big" ran out
		// of time once at load 20 and answered "timed out".) loop has its own 1 s.
		o.PolicyTimeout = 30 * time.Second
	}})
	code, r := h.review("/validate/labels", reviewFor("a", "CREATE", "default", pod(map[string]string{"owner": "x"})))
	if code != 200 || !r.Allowed {
		t.Fatalf("labels: HTTP %d %+v", code, r)
	}
	code, r = h.review("/validate/labels", reviewFor("b", "CREATE", "default", pod(nil)))
	if code != 200 || r.Allowed || r.Status == nil || !strings.Contains(r.Status.Message, "lacks the required labels: owner") {
		t.Fatalf("labels: HTTP %d %+v", code, r)
	}
	code, r = h.review("/validate/mutate", reviewFor("c", "CREATE", "default", pod(nil)))
	if code != 200 || !r.Allowed || len(r.Patch) == 0 {
		t.Fatalf("mutate: HTTP %d %+v", code, r)
	}
	// Each answers without waiting for the server's 30 s deadline (loop: for its own 1 s); the
	// 10 s of slack are for a loaded machine and stay well below 30 s.
	for _, tt := range []struct {
		id, msg  string
		deadline time.Duration
	}{
		{"fatal", "something went badly wrong", 0},
		{"panic", "assignment to entry in nil map", 0},
		{"loop", "timed out", time.Second},
		{"big", "invalid policy response", 0},
		{"garbage", "invalid policy response", 0},
	} {
		t0 := time.Now()
		code, r := h.review("/validate/"+tt.id, reviewFor(tt.id, "CREATE", "default", pod(nil)))
		if took := time.Since(t0); took > tt.deadline+10*time.Second {
			t.Errorf("%s: answered after %v", tt.id, took)
		}
		if code != 200 || r.Allowed || r.Status == nil || r.Status.Code != 500 || !strings.Contains(r.Status.Message, tt.msg) {
			t.Errorf("%s: HTTP %d allowed=%v status=%+v, want 500 and %q", tt.id, code, r.Allowed, r.Status, tt.msg)
		}
	}
}
