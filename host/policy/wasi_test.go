package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const wasiFixture = "test/testdata/policies/wasi-misbehave"

func TestWasiExample(t *testing.T) {
	h, _ := newHost(t)
	mod := testfixture.Module(t, "examples/wasi-required-labels")
	p := load(t, h, policy.Spec{ID: "labels", Module: mod, Settings: json.RawMessage(`{"required_labels":["app","team"]}`)})
	if p.Mode() != metadata.ExecutionModeWasi || p.Digest() != wasm.Digest(mod) {
		t.Fatalf("mode %s digest %s", p.Mode(), p.Digest())
	}
	res, err := p.Validate(context.Background(), []byte(podRequest))
	if err != nil {
		t.Fatal(err)
	}
	if res.Response.Accepted || res.Response.Message == nil || *res.Response.Message != "nginx lacks the required labels: team" {
		t.Fatalf("%+v", res.Response)
	}
	p2 := load(t, h, policy.Spec{ID: "labels2", Module: mod, Settings: json.RawMessage(`{"required_labels":["app"]}`)})
	if res, err := p2.Validate(context.Background(), []byte(podRequest)); err != nil || !res.Response.Accepted {
		t.Fatalf("%v %+v", err, res)
	}
	_, err = h.Load(context.Background(), policy.Spec{ID: "bad", Module: mod, Settings: json.RawMessage(`{"required_labels":[]}`)})
	if !errors.Is(err, policy.ErrInvalidSettings) || !strings.Contains(err.Error(), "required_labels must list at least one label") {
		t.Fatalf("err = %v", err)
	}
	_, err = h.Load(context.Background(), policy.Spec{ID: "contradiction", Module: mod, ExecutionMode: "kubewarden-wapc"})
	if err == nil || !strings.Contains(err.Error(), "different from the one reported inside of the policy's metadata (wasi)") {
		t.Fatalf("err = %v", err)
	}
}

func wasiMisbehave(t *testing.T, h *policy.Host, behaviour string, s policy.Spec) (*policy.Result, error) {
	t.Helper()
	s.ID, s.Module, s.ExecutionMode = "wasi-"+behaviour, testfixture.Module(t, wasiFixture), "wasi"
	s.Settings = json.RawMessage(`{"behaviour":"` + behaviour + `","binding":"kubernetes"}`)
	if s.Timeout == 0 {
		// Generous: only the loop case is about the deadline (and sets its own); "big"
		// writes 1 MB and took more than 500 ms at load 20.
		s.Timeout = 30 * time.Second
	}
	p, err := h.Load(context.Background(), s)
	if err != nil {
		return nil, err
	}
	defer p.Close(context.Background())
	return p.Validate(context.Background(), []byte(podRequest))
}

func TestWasiOutcomes(t *testing.T) {
	h, logs := newHost(t)
	hostCalls := func(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("no deadline")
		}
		return []byte(`{"answer":"` + binding + "/" + namespace + "/" + operation + `"}`), nil
	}
	for _, tc := range []struct {
		behaviour string
		spec      policy.Spec
		accepted  bool
		code      uint16
		message   string // substring
		patch     bool
		err       error
	}{
		{behaviour: "accept", accepted: true},
		{behaviour: "reject", code: 403, message: "rejected by behaviour"},
		{behaviour: "mutate", accepted: true, patch: true},
		{behaviour: "fatal", code: 500, message: "something went badly wrong"},
		{behaviour: "exit", code: 500, message: "exiting with 7"},
		{behaviour: "panic", code: 500, message: "panic: assignment to entry in nil map"},
		{behaviour: "hostcall", spec: policy.Spec{HostCalls: hostCalls}, message: `host answer: {"answer":"kubernetes/ns/op"}`},
		{behaviour: "hostcall", message: "host error: host capability kubernetes/ns/op is not available"},
		{behaviour: "loop", spec: policy.Spec{Timeout: 500 * time.Millisecond}, err: wasm.ErrTimeout},
		{behaviour: "alloc", spec: policy.Spec{MemoryLimitBytes: 64 << 20, Timeout: 10 * time.Second}, err: wasm.ErrMemoryLimit},
		{behaviour: "big", spec: policy.Spec{MaxResponseBytes: 1 << 20}, err: policy.ErrInvalidResponse},
		{behaviour: "garbage", err: policy.ErrInvalidResponse},
		{behaviour: "nothing", err: policy.ErrInvalidResponse},
		{behaviour: "invalid", err: policy.ErrInvalidSettings},
		{behaviour: "settings-exit", err: policy.ErrInvalidSettings},
	} {
		t.Run(tc.behaviour, func(t *testing.T) {
			res, err := wasiMisbehave(t, h, tc.behaviour, tc.spec)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := res.Response
			msg := ""
			if r.Message != nil {
				msg = *r.Message
			}
			var code uint16
			if r.Code != nil {
				code = *r.Code
			}
			if r.Accepted != tc.accepted || code != tc.code || !strings.Contains(msg, tc.message) || (res.Patch != nil) != tc.patch {
				t.Fatalf("accepted %v code %d message %q patch %s", r.Accepted, code, msg, res.Patch)
			}
			// a Go panic's goroutine dump goes to the log, not to the user
			if strings.Contains(msg, "goroutine") || strings.Contains(msg, ".go:") {
				t.Fatalf("message carries the goroutine dump: %q", msg)
			}
		})
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"policy crashed"`) || !strings.Contains(l, "goroutine 1 [running]") {
		t.Errorf("the panic's goroutine dump is not logged:\n%s", l)
	}
}

func TestBareWasiModuleNeedsMode(t *testing.T) {
	h, _ := newHost(t)
	// the compiler output before annotate: no metadata
	_, err := h.Load(context.Background(), policy.Spec{ID: "bare", Module: testfixture.File(t, wasiFixture+"/policy.raw.wasm")})
	if !errors.Is(err, wasm.ErrNotWapc) || !strings.Contains(err.Error(), "-e wasi") {
		t.Fatalf("err = %v", err)
	}
}

func TestWasiSettingsExitMessage(t *testing.T) {
	h, _ := newHost(t)
	_, err := wasiMisbehave(t, h, "settings-exit", policy.Spec{})
	if err == nil || !strings.Contains(err.Error(), "settings exploded") {
		t.Fatalf("err = %v", err)
	}
}

// opaModule is the smallest module that looks built by OPA: it exports opa_eval.
var opaModule = []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
	1, 4, 1, 0x60, 0, 0, // type: func()
	3, 2, 1, 0, // one function
	7, 12, 1, 8, 'o', 'p', 'a', '_', 'e', 'v', 'a', 'l', 0, 0, // export opa_eval
	10, 4, 1, 2, 0, 0x0b, // body
}

func TestSelectMode(t *testing.T) {
	wasiMod := testfixture.Module(t, wasiFixture)
	md := func(mode string) *metadata.Metadata { return &metadata.Metadata{ExecutionMode: mode} }
	for _, tc := range []struct {
		name      string
		md        *metadata.Metadata
		requested string
		module    []byte
		want      string
		err       string
	}{
		{name: "default", module: wasiMod, want: "kubewarden-wapc"},
		{name: "flag", requested: "wasi", module: wasiMod, want: "wasi"},
		{name: "metadata", md: md("wasi"), module: wasiMod, want: "wasi"},
		{name: "metadata and same flag", md: md("wasi"), requested: "wasi", module: wasiMod, want: "wasi"},
		{name: "metadata without mode", md: md(""), requested: "wasi", module: wasiMod, err: "CLI flag (wasi) is different from the one reported inside of the policy's metadata (kubewarden-wapc)"},
		{name: "unknown flag", requested: "rust", module: wasiMod, err: `unknown execution mode "rust"`},
		{name: "rego without mode", module: opaModule, err: "built with a Rego-based framework and has no metadata"},
		{name: "rego as wasi", requested: "wasi", module: opaModule, err: "built with a Rego-based framework, but the execution mode specified via CLI flag is wasi"},
		{name: "rego metadata wapc", md: md("kubewarden-wapc"), module: opaModule, err: "built with a Rego-based framework, but its executionMode is kubewarden-wapc"},
		{name: "opa on a wasi module", requested: "opa", module: wasiMod, err: "has not been built with a Rego-based framework"},
		{name: "opa", requested: "opa", module: opaModule, want: "opa"},
		{name: "gatekeeper", md: md("gatekeeper"), module: opaModule, want: "gatekeeper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := policy.SelectMode(tc.md, tc.requested, tc.module)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}
