package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const (
	opaExample        = "examples/opa-required-labels"
	gatekeeperExample = "examples/gatekeeper-allowed-registries"
	opaMisbehave      = "test/testdata/policies/opa-misbehave"
)

func message(r *policy.Result) string {
	if r.Response.Message == nil {
		return ""
	}
	return *r.Response.Message
}

func code(r *policy.Result) uint16 {
	if r.Response.Code == nil {
		return 0
	}
	return *r.Response.Code
}

// TestOPAMode: the opa example (executionMode opa in its metadata) gets
// {"request"} as input and its settings as data, and answers an
// AdmissionResponse; Kubewarden never validates a Rego policy's settings.
func TestOPAMode(t *testing.T) {
	h, _ := newHost(t)
	mod := testfixture.Module(t, opaExample)
	p := load(t, h, policy.Spec{ID: "labels", Module: mod, Settings: json.RawMessage(`{"labels":["team","owner"]}`), PoolSize: 2})
	if p.Mode() != metadata.ExecutionModeOPA || p.Digest() != wasm.Digest(mod) {
		t.Fatalf("mode %s digest %s", p.Mode(), p.Digest())
	}
	if live, size := p.Instances(); live != 1 || size != 2 {
		t.Fatalf("instances %d/%d", live, size)
	}
	res, err := p.Validate(context.Background(), testfixture.File(t, opaExample+"/testdata/pod-missing-owner.json"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Response.Accepted || message(res) != `Pod shop/bad: mandatory label "owner" is missing` || code(res) != 0 {
		t.Fatalf("%+v", res.Response)
	}
	if res, err := p.Validate(context.Background(), testfixture.File(t, opaExample+"/testdata/pod-labelled.json")); err != nil || !res.Response.Accepted {
		t.Fatalf("%v %+v", err, res)
	}
	// A raw request is evaluated as {"request": raw}.
	res, err = p.ValidateRaw(context.Background(), []byte(`{"kind":{"kind":"Widget"},"object":{"metadata":{"name":"w","labels":{"team":"a"}}}}`))
	if err != nil || res.Response.Accepted || message(res) != `Widget /w: mandatory label "owner" is missing` {
		t.Fatalf("raw: %v %+v", err, res)
	}
	// Settings are never refused: these are just data the policy ignores.
	p2 := load(t, h, policy.Spec{ID: "odd", Module: mod, Settings: json.RawMessage(`{"labels":"not a list"}`)})
	if res, err := p2.Validate(context.Background(), testfixture.File(t, opaExample+"/testdata/pod-missing-owner.json")); err != nil || !res.Response.Accepted {
		t.Fatalf("%v %+v", err, res)
	}
}

// TestGatekeeperMode: {"parameters": settings, "review": request} in,
// violations out; raw requests are rejected as Kubewarden rejects them.
func TestGatekeeperMode(t *testing.T) {
	h, _ := newHost(t)
	p := load(t, h, policy.Spec{ID: "registries", Module: testfixture.Module(t, gatekeeperExample), Settings: json.RawMessage(`{"registries":["registry.example.com/"]}`)})
	if p.Mode() != metadata.ExecutionModeGatekeeper {
		t.Fatalf("mode %s", p.Mode())
	}
	res, err := p.Validate(context.Background(), testfixture.File(t, gatekeeperExample+"/testdata/pod-disallowed.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The violations in the order of the result set, joined by ", ".
	want := []string{`container app: image docker.io/library/nginx:latest comes from none of the allowed registries ["registry.example.com/"]`, `container app: image docker.io/library/nginx:latest uses the tag latest`}
	if m := message(res); res.Response.Accepted || code(res) != 0 || (m != want[0]+", "+want[1] && m != want[1]+", "+want[0]) {
		t.Fatalf("got %+v %q, want %q", res.Response, message(res), want)
	}
	if res, err := p.Validate(context.Background(), testfixture.File(t, gatekeeperExample+"/testdata/pod-allowed.json")); err != nil || !res.Response.Accepted {
		t.Fatalf("%v %+v", err, res)
	}
	res, err = p.ValidateRaw(context.Background(), []byte(`{"anything":1}`))
	if err != nil || res.Response.Accepted || message(res) != "Gatekeeper does not support raw validation requests" || code(res) != 500 {
		t.Fatalf("raw: %v %+v", err, res)
	}
	// The parameters are the settings.
	p2 := load(t, h, policy.Spec{ID: "docker", Module: testfixture.Module(t, gatekeeperExample), Settings: json.RawMessage(`{"registries":["docker.io/","registry.example.com/"]}`)})
	res, err = p2.Validate(context.Background(), testfixture.File(t, gatekeeperExample+"/testdata/pod-disallowed.json"))
	if err != nil || message(res) != "container app: image docker.io/library/nginx:latest uses the tag latest" {
		t.Fatalf("%v %+v", err, res)
	}
}

// TestRegoModeSelection: a module without metadata needs -e; the mode
// decides the shapes.
func TestRegoModeSelection(t *testing.T) {
	h, _ := newHost(t)
	raw := testfixture.File(t, opaExample+"/policy.raw.wasm")
	_, err := h.Load(context.Background(), policy.Spec{ID: "bare", Module: raw})
	if err == nil || !strings.Contains(err.Error(), "give the execution mode (-e opa or -e gatekeeper)") {
		t.Fatalf("err = %v", err)
	}
	_, err = h.Load(context.Background(), policy.Spec{ID: "wasi", Module: raw, ExecutionMode: "wasi"})
	if err == nil || !strings.Contains(err.Error(), "Rego-based framework") {
		t.Fatalf("err = %v", err)
	}
	// Evaluated as gatekeeper, the opa answer is not a list of violations: accepted.
	// (-e decides for a module without metadata.)
	p := load(t, h, policy.Spec{ID: "gk", Module: raw, ExecutionMode: "gatekeeper"})
	if res, err := p.Validate(context.Background(), []byte(podRequest)); err != nil || !res.Response.Accepted {
		t.Fatalf("%v %+v", err, res)
	}
}

// TestOPAModeMisbehave: the answers Kubewarden turns into code-500
// rejections, a patch passed through, and the failures (abort, deadline,
// output cap) that are errors as on the waPC path.
func TestOPAModeMisbehave(t *testing.T) {
	h, _ := newHost(t)
	mod := testfixture.File(t, opaMisbehave+"/policy.wasm")
	spec := func(behaviour string) policy.Spec {
		return policy.Spec{ID: behaviour, Module: mod, ExecutionMode: "opa", Settings: json.RawMessage(`{"behaviour":"` + behaviour + `"}`), Timeout: time.Second}
	}
	for _, tt := range []struct{ behaviour, msg string }{
		{"none", "cannot interpret OPA policy result"},
		{"no-uid", "missing field `uid`"},
		{"no-allowed", "missing field `allowed`"},
	} {
		p := load(t, h, spec(tt.behaviour))
		res, err := p.Validate(context.Background(), []byte(podRequest))
		if err != nil || res.Response.Accepted || message(res) != tt.msg || code(res) != 500 {
			t.Errorf("%s: %v %+v %q", tt.behaviour, err, res, message(res))
		}
	}
	p := load(t, h, spec("answer"))
	res, err := p.Validate(context.Background(), []byte(podRequest))
	if err != nil || !res.Response.Accepted || message(res) != "the name is bad" || code(res) != 403 {
		t.Fatalf("answer: %v %+v", err, res)
	}
	p = load(t, h, spec("patch"))
	res, err = p.Validate(context.Background(), []byte(podRequest))
	if err != nil || !res.Response.Accepted || string(res.Patch) != `[{"op":"add","path":"/metadata/labels/patched","value":"yes"}]` || len(res.Response.Warnings) != 1 {
		t.Fatalf("patch: %v %+v %s", err, res, res.Patch)
	}
	if v := res.Verdict(); string(v.Patch) != string(res.Patch) {
		t.Fatalf("verdict patch %s", v.Patch)
	}
	for _, tt := range []struct {
		behaviour string
		want      error
		s         policy.Spec
	}{
		{"conflict", wasm.ErrTrap, spec("conflict")},
		{"endless", wasm.ErrTimeout, spec("endless")},
		{"big", policy.ErrInvalidResponse, func() policy.Spec {
			s := spec("big")
			s.MaxResponseBytes, s.Timeout = 1<<20, 10*time.Second
			return s
		}()},
	} {
		p := load(t, h, tt.s)
		t0 := time.Now()
		_, err := p.Validate(context.Background(), []byte(podRequest))
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), "policy "+tt.behaviour+":") {
			t.Errorf("%s: err = %v, want %v", tt.behaviour, err, tt.want)
		}
		if d := time.Since(t0); d > tt.s.Timeout+2*time.Second {
			t.Errorf("%s: took %s", tt.behaviour, d)
		}
	}
	if errors.Is(nil, opa.ErrOutputLimit) {
		t.Fatal()
	}
}

// TestRegoModuleRefusedAtLoad: builtins Kubewarden's host lacks, listed.
func TestRegoModuleRefusedAtLoad(t *testing.T) {
	h, _ := newHost(t)
	_, err := h.Load(context.Background(), policy.Spec{ID: "needs-builtins", Module: testfixture.Module(t, "test/testdata/policies/opa-missing-builtin"), ExecutionMode: "opa"})
	if !errors.Is(err, opa.ErrMissingBuiltins) || !strings.Contains(err.Error(), "policy needs-builtins: executionMode opa:") || !strings.Contains(err.Error(), `"time.parse_rfc3339_ns"`) {
		t.Fatalf("err = %v", err)
	}
}
