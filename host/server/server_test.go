package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

func strp(s string) *string { return &s }

// semanticsPolicies serves the example policies under every admission
// semantic, plus scripted policies for what the examples cannot produce.
func semanticsPolicies(t testing.TB) string {
	labels := wasmPath(t, "examples/required-labels")
	caps := wasmPath(t, "examples/capabilities-drop")
	return fmt.Sprintf(`
labels:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
labels-msg:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  message: "custom message"
labels-monitor:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  policyMode: monitor
caps:
  module: file://%[2]s
  allowedToMutate: true
caps-nomutate:
  module: %[2]s
caps-monitor:
  module: %[2]s
  allowedToMutate: true
  policyMode: monitor
extras:
  module: script://extras
mutate-anything:
  module: script://mutate
  allowedToMutate: true
broken:
  module: /nonexistent/policy.wasm
bad-settings:
  module: %[1]s
  settings: {mandatory_labels: 3}
rawp:
  module: script://raw
  allowedToMutate: true
grp:
  expression: "labels_ok() || privileged_ns()"
  message: "needs an owner label outside kube-system"
  policies:
    labels_ok:
      module: %[1]s
      settings: {mandatory_labels: [owner]}
    privileged_ns:
      module: script://privileged
grp-monitor:
  expression: "!labels_ok()"
  policyMode: monitor
  policies:
    labels_ok:
      module: %[1]s
      settings: {mandatory_labels: [owner]}
`, labels, caps)
}

func semanticsLoader(t testing.TB) *testLoader {
	l := newTestLoader(t)
	l.scripts["extras"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: true, Warnings: []string{"deprecated field"}, AuditAnnotations: map[string]string{"tollgate.dev/x": "y"}}, nil
	}
	l.scripts["mutate"] = func(req *admission.Request, _ []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: true, MutatedObject: json.RawMessage(`{"metadata":{"labels":{"mutated":"yes"}}}`)}, nil
	}
	l.scripts["privileged"] = func(req *admission.Request, _ []byte) (protocol.ValidationResponse, error) {
		if req.Namespace == "kube-system" {
			return protocol.ValidationResponse{Accepted: true}, nil
		}
		return protocol.ValidationResponse{Accepted: false, Message: strp("not a privileged namespace")}, nil
	}
	l.scripts["raw"] = func(_ *admission.Request, raw []byte) (protocol.ValidationResponse, error) {
		var v struct{ User string }
		json.Unmarshal(raw, &v)
		if v.User == "alice" {
			return protocol.ValidationResponse{Accepted: true, MutatedObject: json.RawMessage(`{"uid":"r1","user":"alice","checked":true}`)}, nil
		}
		return protocol.ValidationResponse{Accepted: false, Message: strp("only alice"), Code: func() *uint16 { c := uint16(403); return &c }()}, nil
	}
	return l
}

func decodePatch(t *testing.T, r *admission.Response) []map[string]any {
	t.Helper()
	if r.PatchType == nil || *r.PatchType != "JSONPatch" {
		t.Fatalf("patchType = %v", r.PatchType)
	}
	var ops []map[string]any
	if err := json.Unmarshal(r.Patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", r.Patch, err)
	}
	return ops
}

func TestAdmissionSemantics(t *testing.T) {
	l := semanticsLoader(t)
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: l, options: func(o *config.Options) {
		o.AlwaysAcceptNamespace = "trusted"
	}})
	owner := map[string]string{"owner": "me"}
	tests := []struct {
		name        string
		path        string
		body        []byte
		wantHTTP    int
		wantAllowed bool
		wantPatch   string // substring of the decoded patch; "" means no patch
		wantMsg     string // substring of status.message
		wantCause   string // substring of some status.details.causes[].message
		check       func(t *testing.T, r *admission.Response)
	}{
		{name: "accepted", path: "/validate/labels", body: reviewFor("u1", "CREATE", "default", pod(owner)), wantHTTP: 200, wantAllowed: true},
		{name: "rejected with the policy's message and code", path: "/validate/labels", body: reviewFor("u2", "CREATE", "default", pod(nil)), wantHTTP: 200,
			wantMsg: `mandatory label "owner" is missing`, check: func(t *testing.T, r *admission.Response) {
				if r.Status.Code != 422 {
					t.Errorf("code = %d, want the policy's 422", r.Status.Code)
				}
			}},
		{name: "message replaces, original in causes", path: "/validate/labels-msg", body: reviewFor("u3", "CREATE", "default", pod(nil)), wantHTTP: 200,
			wantMsg: "custom message", wantCause: `mandatory label "owner" is missing`},
		{name: "monitor allows a rejection", path: "/validate/labels-monitor", body: reviewFor("u4", "CREATE", "default", pod(nil)), wantHTTP: 200, wantAllowed: true,
			check: func(t *testing.T, r *admission.Response) {
				if r.Status != nil {
					t.Errorf("monitor response has a status: %+v", r.Status)
				}
			}},
		{name: "mutation", path: "/validate/caps", body: reviewFor("u5", "CREATE", "default", pod(owner, "NET_ADMIN")), wantHTTP: 200, wantAllowed: true, wantPatch: "BPF"},
		{name: "no mutation needed", path: "/validate/caps", body: reviewFor("u6", "CREATE", "default", pod(owner)), wantHTTP: 200, wantAllowed: true},
		{name: "mutation by a policy not allowed to mutate", path: "/validate/caps-nomutate", body: reviewFor("u7", "CREATE", "default", pod(owner, "NET_ADMIN")), wantHTTP: 200,
			wantMsg: "configured to not allow mutations"},
		{name: "monitor drops the patch", path: "/validate/caps-monitor", body: reviewFor("u8", "CREATE", "default", pod(owner, "NET_ADMIN")), wantHTTP: 200, wantAllowed: true},
		{name: "audit gives the raw verdict (patch kept)", path: "/audit/caps-nomutate", body: reviewFor("u9", "CREATE", "default", pod(owner, "NET_ADMIN")), wantHTTP: 200, wantAllowed: true, wantPatch: "BPF"},
		{name: "audit ignores monitor mode", path: "/audit/labels-monitor", body: reviewFor("u10", "CREATE", "default", pod(nil)), wantHTTP: 200, wantMsg: "owner"},
		{name: "audit ignores the message override", path: "/audit/labels-msg", body: reviewFor("u10b", "CREATE", "default", pod(nil)), wantHTTP: 200, wantMsg: "mandatory label"},
		{name: "warnings and audit annotations pass through", path: "/validate/extras", body: reviewFor("u11", "CREATE", "default", pod(nil)), wantHTTP: 200, wantAllowed: true,
			check: func(t *testing.T, r *admission.Response) {
				if len(r.Warnings) != 1 || r.Warnings[0] != "deprecated field" || r.AuditAnnotations["tollgate.dev/x"] != "y" {
					t.Errorf("warnings %v annotations %v", r.Warnings, r.AuditAnnotations)
				}
			}},
		{name: "mutation of DELETE is rejected", path: "/validate/mutate-anything", body: reviewFor("u12", "DELETE", "default", nil), wantHTTP: 200, wantMsg: "DELETE"},
		{name: "mutation of CREATE by the same policy is fine", path: "/validate/mutate-anything", body: reviewFor("u13", "CREATE", "default", pod(nil)), wantHTTP: 200, wantAllowed: true, wantPatch: "mutated"},
		{name: "policy that failed to load answers 500", path: "/validate/broken", body: reviewFor("u14", "CREATE", "default", pod(nil)), wantHTTP: 500, wantMsg: "policy broken is not loaded",
			check: func(t *testing.T, r *admission.Response) {
				if r.Status.Code != 500 {
					t.Errorf("code %d", r.Status.Code)
				}
			}},
		{name: "policy whose settings were rejected answers 500", path: "/validate/bad-settings", body: reviewFor("u14b", "CREATE", "default", pod(nil)), wantHTTP: 500,
			wantMsg: "settings rejected by the policy"},
		{name: "always-accept namespace", path: "/validate/labels", body: reviewFor("u15", "CREATE", "trusted", pod(nil)), wantHTTP: 200, wantAllowed: true},
		{name: "always-accept namespace skips even a broken policy", path: "/validate/broken", body: reviewFor("u16", "CREATE", "trusted", pod(nil)), wantHTTP: 200, wantAllowed: true},
		{name: "group accepted by the first member", path: "/validate/grp", body: reviewFor("u17", "CREATE", "default", pod(owner)), wantHTTP: 200, wantAllowed: true},
		{name: "group accepted by the second member", path: "/validate/grp", body: reviewFor("u18", "CREATE", "kube-system", pod(nil)), wantHTTP: 200, wantAllowed: true},
		{name: "group rejected: member verdicts in causes", path: "/validate/grp", body: reviewFor("u19", "CREATE", "default", pod(nil)), wantHTTP: 200,
			wantMsg: "needs an owner label outside kube-system", wantCause: "not a privileged namespace",
			check: func(t *testing.T, r *admission.Response) {
				c := r.Status.Details.Causes
				if len(c) != 2 || c[0].Field != "spec.policies.labels_ok" || !strings.Contains(c[0].Message, "owner") || c[1].Field != "spec.policies.privileged_ns" {
					t.Errorf("causes = %+v", c)
				}
			}},
		{name: "group in monitor mode", path: "/validate/grp-monitor", body: reviewFor("u20", "CREATE", "default", pod(owner)), wantHTTP: 200, wantAllowed: true},
		{name: "audit of a monitor group gives the verdict", path: "/audit/grp-monitor", body: reviewFor("u21", "CREATE", "default", pod(owner)), wantHTTP: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, r := h.review(tt.path, tt.body)
			if code != tt.wantHTTP {
				t.Fatalf("HTTP %d, want %d", code, tt.wantHTTP)
			}
			var req struct{ Request struct{ UID string } }
			json.Unmarshal(tt.body, &req)
			if r.UID != req.Request.UID {
				t.Errorf("uid %q, want %q", r.UID, req.Request.UID)
			}
			if r.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v, want %v (status %+v)", r.Allowed, tt.wantAllowed, r.Status)
			}
			if tt.wantPatch == "" && (r.Patch != nil || r.PatchType != nil) {
				t.Errorf("unexpected patch %s", r.Patch)
			}
			if tt.wantPatch != "" {
				ops := decodePatch(t, r)
				b, _ := json.Marshal(ops)
				if !strings.Contains(string(b), tt.wantPatch) {
					t.Errorf("patch %s does not contain %q", b, tt.wantPatch)
				}
			}
			if tt.wantMsg != "" && (r.Status == nil || !strings.Contains(r.Status.Message, tt.wantMsg)) {
				t.Errorf("status %+v, want message containing %q", r.Status, tt.wantMsg)
			}
			if tt.wantCause != "" {
				found := false
				if r.Status != nil && r.Status.Details != nil {
					for _, c := range r.Status.Details.Causes {
						found = found || strings.Contains(c.Message, tt.wantCause)
					}
				}
				if !found {
					t.Errorf("status %+v has no cause containing %q", r.Status, tt.wantCause)
				}
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
	if !strings.Contains(h.logs.String(), "monitor mode: the request would have been rejected") {
		t.Errorf("monitor mode did not log the would-be verdict")
	}
	if !strings.Contains(h.logs.String(), "monitor mode: the request would have been mutated") {
		t.Errorf("monitor mode did not log the would-be mutation")
	}
}

func TestGroupIsLazy(t *testing.T) {
	l := semanticsLoader(t)
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: l})
	var priv *scripted
	for _, ev := range l.evals {
		if s, ok := ev.(*scripted); ok && s.fn != nil {
			if r, _ := s.fn(&admission.Request{Namespace: "kube-system"}, nil); r.Accepted && r.Warnings == nil && r.MutatedObject == nil {
				priv = s
			}
		}
	}
	if priv == nil {
		t.Fatal("privileged_ns evaluator not found")
	}
	before := priv.calls.Load()
	_, r := h.review("/validate/grp", reviewFor("lazy", "CREATE", "default", pod(map[string]string{"owner": "me"})))
	if !r.Allowed || priv.calls.Load() != before {
		t.Fatalf("allowed=%v; privileged_ns called %d times, want 0 (short-circuit)", r.Allowed, priv.calls.Load()-before)
	}
}

func TestValidateRaw(t *testing.T) {
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: semanticsLoader(t)})
	code, b := h.post("/validate_raw/rawp", []byte(`{"request": {"uid": "r1", "user": "alice"}}`))
	var out struct{ Response admission.Response }
	if err := json.Unmarshal(b, &out); code != 200 || err != nil {
		t.Fatalf("HTTP %d %s", code, b)
	}
	if !out.Response.Allowed || out.Response.UID != "r1" || !strings.Contains(string(out.Response.Patch), "checked") {
		t.Fatalf("response %+v patch %s", out.Response, out.Response.Patch)
	}
	code, b = h.post("/validate_raw/rawp", []byte(`{"request": {"user": "bob"}}`))
	json.Unmarshal(b, &out)
	if code != 200 || out.Response.Allowed || out.Response.Status.Message != "only alice" || out.Response.Status.Code != 403 {
		t.Fatalf("HTTP %d %s", code, b)
	}
	code, b = h.post("/validate_raw/rawp", []byte(`{"nothing": 1}`))
	if code != 400 || !strings.Contains(string(b), `"request" is missing`) {
		t.Fatalf("HTTP %d %s", code, b)
	}
}

func TestBadRequests(t *testing.T) {
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: semanticsLoader(t), options: func(o *config.Options) { o.MaxRequestBytes = 64 << 10 }})
	big := reviewFor("big", "CREATE", "default", map[string]any{"data": strings.Repeat("x", 70<<10)})
	tests := []struct {
		name, method, path string
		body               []byte
		want               int
		wantBody           string
	}{
		{"oversize", "POST", "/validate/labels", big, 413, "larger than 65536"},
		{"not JSON", "POST", "/validate/labels", []byte(`{"request": `), 400, "invalid JSON"},
		{"JSON array", "POST", "/validate/labels", []byte(`[1]`), 400, "not an object"},
		{"no uid", "POST", "/validate/labels", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"operation":"CREATE","kind":{"kind":"Pod"}}}`), 400, "missing uid"},
		{"empty", "POST", "/validate/labels", nil, 400, "empty input"},
		{"unknown policy", "POST", "/validate/nope", reviewFor("x", "CREATE", "default", pod(nil)), 404, `no policy "nope"`},
		{"GET", "GET", "/validate/labels", nil, 405, ""},
		{"unknown path", "POST", "/mutate/labels", reviewFor("x", "CREATE", "default", pod(nil)), 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, h.base+tt.path, bytes.NewReader(tt.body))
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			if resp.StatusCode != tt.want || !strings.Contains(b.String(), tt.wantBody) {
				t.Fatalf("HTTP %d %q, want %d containing %q", resp.StatusCode, b.String(), tt.want, tt.wantBody)
			}
		})
	}
	// the server still serves after all that
	if _, r := h.review("/validate/labels", reviewFor("after", "CREATE", "default", pod(map[string]string{"owner": "x"}))); !r.Allowed {
		t.Fatal("server broken after bad requests")
	}
}

func TestProbeEndpoints(t *testing.T) {
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: semanticsLoader(t)})
	h.review("/validate/labels", reviewFor("m1", "CREATE", "default", pod(nil)))
	h.review("/validate/caps", reviewFor("m2", "CREATE", "default", pod(nil, "X")))
	if code, body := h.get("/readiness"); code != 200 || body != "ok\n" {
		t.Fatalf("readiness %d %q", code, body)
	}
	if code, _ := h.get("/livez"); code != 200 {
		t.Fatalf("livez %d", code)
	}
	code, metrics := h.get("/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{
		`tollgate_policy_evaluations_total{accepted="false",mode="protect",mutated="false",operation="CREATE",policy="labels"} 1`,
		`tollgate_policy_evaluations_total{accepted="true",mode="protect",mutated="true",operation="CREATE",policy="caps"} 1`,
		`tollgate_policy_evaluation_duration_seconds_bucket{accepted="false",mode="protect",mutated="false",operation="CREATE",policy="labels",le="+Inf"} 1`,
		`tollgate_policy_loaded{policy="broken"} 0`,
		`tollgate_policy_loaded{policy="labels"} 1`,
		`tollgate_policy_loaded{policy="grp"} 1`,
		`tollgate_server_requests_total{code="200",endpoint="validate"} 2`,
		`tollgate_server_requests_in_flight 0`,
		`tollgate_config_generation 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	code, body := h.get("/policies")
	var pl struct {
		Generation uint64
		Policies   []status.Policy
	}
	if err := json.Unmarshal([]byte(body), &pl); code != 200 || err != nil {
		t.Fatalf("policies %d %v %s", code, err, body)
	}
	byID := map[string]status.Policy{}
	for _, p := range pl.Policies {
		byID[p.ID] = p
	}
	if b := byID["broken"]; b.State != "failed" || !strings.Contains(b.Error, "nonexistent") {
		t.Errorf("broken = %+v", b)
	}
	if c := byID["caps"]; c.State != "ready" || !strings.HasPrefix(c.Digest, "sha256:") || !c.AllowedToMutate || c.Mode != "protect" || c.Kind != "policy" {
		t.Errorf("caps = %+v", c)
	}
	if g := byID["grp"]; g.Kind != "group" || len(g.Members) != 2 || g.Expression == "" || g.Members[0].State != "ready" {
		t.Errorf("grp = %+v", g)
	}
	if m := byID["labels-monitor"]; m.Mode != "monitor" {
		t.Errorf("labels-monitor = %+v", m)
	}
	if b := byID["bad-settings"]; b.State != "failed" || !strings.Contains(b.Error, "settings rejected") {
		t.Errorf("bad-settings = %+v", b)
	}
	if len(pl.Policies) != 13 || pl.Generation != 1 {
		t.Errorf("%d policies, generation %d", len(pl.Policies), pl.Generation)
	}
}

func TestStrictStartup(t *testing.T) {
	h := start(t, harnessOpts{policies: "ok:\n  module: script://ok\n", loader: func() *testLoader {
		l := newTestLoader(t)
		l.scripts["ok"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
			return protocol.ValidationResponse{Accepted: true}, nil
		}
		return l
	}(), noStart: true})
	_ = h
	cfg := &config.Config{Options: config.Defaults(), Policies: []config.Policy{{ID: "bad", Module: "/nope.wasm", Settings: json.RawMessage("{}"), Mode: config.ModeProtect}}}
	cfg.Options.Strict = true
	_, err := New(t.Context(), Options{Config: cfg, Loader: newTestLoader(t)})
	if err == nil || !strings.Contains(err.Error(), "policy bad") || !strings.Contains(err.Error(), "--strict") {
		t.Fatalf("strict start-up: %v", err)
	}
}
