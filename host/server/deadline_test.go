package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
)

// TestSleepingPoliciesAnswerAtDeadline serves, with --policy-timeout 2s and
// one worker, a policy of each execution mode that tries to hold its worker
// past the deadline: a standard-Go WASI policy calling time.Sleep(20s), a
// TinyGo waPC policy calling time.Sleep(20s), and an OPA and a Gatekeeper
// Rego policy looping for billions of iterations (Rego has no way to sleep:
// no builtin waits, so a loop is the longest a Rego policy can hold a
// worker). Each is answered by its deadline (plus a margin for a loaded
// machine), and the one worker is free at once for the next request.
// (Both sleeps end in WASI poll_oneoff, whose clock really waits: before the
// sleeps ended at the deadline, both were answered after 20 s.)
func TestSleepingPoliciesAnswerAtDeadline(t *testing.T) {
	pols := fmt.Sprintf(`
good:
  module: %[1]s
  settings: {}
wasi-sleep:
  module: %[2]s
  settings: {behaviour: sleep}
wapc-sleep:
  module: %[3]s
  settings: {behaviour: sleep}
opa-endless:
  module: %[4]s
  settings: {behaviour: endless}
gatekeeper-endless:
  module: %[5]s
`, wasmPath(t, "test/testdata/policies/misbehave"), wasmPath(t, "test/testdata/policies/wasi-misbehave"),
		wasmPath(t, "test/testdata/policies/misbehave"), wasmPath(t, "test/testdata/policies/opa-misbehave"),
		wasmPath(t, "test/testdata/policies/gatekeeper-endless"))
	const deadline = 2 * time.Second
	h := start(t, harnessOpts{policies: pols, loader: newTestLoader(t), options: func(o *config.Options) {
		o.Workers, o.PolicyTimeout = 1, deadline
	}})
	for _, id := range []string{"wasi-sleep", "wapc-sleep", "opa-endless", "gatekeeper-endless"} {
		t0 := time.Now()
		code, r := h.review("/validate/"+id, reviewFor(id, "CREATE", "default", pod(nil)))
		took := time.Since(t0)
		if took > deadline+2*time.Second {
			t.Errorf("%s: answered after %v, deadline %v", id, took, deadline)
		}
		if code != 200 || r.Allowed || r.Status == nil || r.Status.Code != 500 || !strings.Contains(r.Status.Message, "timed out") {
			t.Errorf("%s: HTTP %d %+v, want a 500 \"timed out\" rejection", id, code, r)
		}
		// the one worker is free: a healthy policy answers at once
		t1 := time.Now()
		code, r = h.review("/validate/good", reviewFor("after-"+id, "CREATE", "default", pod(nil)))
		if code != 200 || !r.Allowed || time.Since(t1) > time.Second {
			t.Errorf("after %s: good policy HTTP %d allowed=%v after %v; the worker is still held", id, code, r.Allowed, time.Since(t1))
		}
	}
}
