package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
)

// TestServeRegoPolicies serves executionMode opa and gatekeeper policies
// (chosen by their metadata): the examples accept and reject, a patch from
// an opa policy is applied, raw requests to a gatekeeper policy and
// unreadable opa answers are rejected with code 500, and an abort and an
// endless loop are answered within the deadline.
func TestServeRegoPolicies(t *testing.T) {
	labels := wasmPath(t, "examples/opa-required-labels")
	registries := wasmPath(t, "examples/gatekeeper-allowed-registries")
	bad := wasmPath(t, "test/testdata/policies/opa-misbehave")
	pols := fmt.Sprintf(`
labels:
  module: %[1]s
  settings: {labels: [owner]}
registries:
  module: %[2]s
  settings: {registries: [registry.example.com/]}
patch:
  module: %[3]s
  settings: {behaviour: patch}
  allowedToMutate: true
no-uid:
  module: %[3]s
  settings: {behaviour: no-uid}
conflict:
  module: %[3]s
  settings: {behaviour: conflict}
endless:
  module: %[3]s
  settings: {behaviour: endless}
  timeoutEvalSeconds: 1
`, labels, registries, bad)
	h := start(t, harnessOpts{policies: pols, loader: newTestLoader(t), options: func(o *config.Options) {
		o.Workers = 2
		o.PolicyTimeout = 2 * time.Second
	}})
	code, r := h.review("/validate/labels", reviewFor("a", "CREATE", "default", pod(map[string]string{"owner": "x"})))
	if code != 200 || !r.Allowed || r.UID != "a" {
		t.Fatalf("labels: HTTP %d %+v", code, r)
	}
	code, r = h.review("/validate/labels", reviewFor("b", "CREATE", "default", pod(nil)))
	if code != 200 || r.Allowed || r.Status == nil || !strings.Contains(r.Status.Message, `mandatory label "owner" is missing`) {
		t.Fatalf("labels: HTTP %d %+v", code, r)
	}
	code, r = h.review("/validate/registries", reviewFor("c", "CREATE", "default", pod(nil)))
	if code != 200 || r.Allowed || r.Status == nil || !strings.Contains(r.Status.Message, "container app: image nginx comes from none of the allowed registries") {
		t.Fatalf("registries: HTTP %d %+v", code, r)
	}
	code, r = h.review("/validate/patch", reviewFor("d", "CREATE", "default", pod(map[string]string{"a": "b"})))
	if code != 200 || !r.Allowed || len(r.Patch) == 0 {
		t.Fatalf("patch: HTTP %d %+v", code, r)
	}
	code, b := h.post("/validate_raw/registries", []byte(`{"request":{"uid":"e","anything":1}}`))
	var raw struct{ Response admission.Response }
	if err := json.Unmarshal(b, &raw); err != nil || code != 200 || raw.Response.Allowed || raw.Response.Status == nil ||
		raw.Response.Status.Code != 500 || raw.Response.Status.Message != "Gatekeeper does not support raw validation requests" {
		t.Fatalf("raw: HTTP %d %s", code, b)
	}
	for _, tt := range []struct {
		id, msg  string
		deadline time.Duration
	}{
		{"no-uid", "missing field `uid`", time.Second},
		{"conflict", "opa_abort", time.Second},
		{"endless", "timed out", 2 * time.Second},
	} {
		t0 := time.Now()
		code, r := h.review("/validate/"+tt.id, reviewFor(tt.id, "CREATE", "default", pod(nil)))
		if took := time.Since(t0); took > tt.deadline+1500*time.Millisecond {
			t.Errorf("%s: answered after %v", tt.id, took)
		}
		if code != 200 || r.Allowed || r.Status == nil || r.Status.Code != 500 || !strings.Contains(r.Status.Message, tt.msg) {
			t.Errorf("%s: HTTP %d allowed=%v status=%+v, want 500 and %q", tt.id, code, r.Allowed, r.Status, tt.msg)
		}
	}
}
