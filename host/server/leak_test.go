package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestFailureMessagesShort: what the apiserver (and so kubectl) gets for a
// policy that trapped, ran out of memory or panicked is one short line
// naming the policy and the cause, without the Wasm stack trace, the Go
// goroutine dump or the guest's stderr; the server log has the details.
func TestFailureMessagesShort(t *testing.T) {
	bad := wasmPath(t, "test/testdata/policies/misbehave")
	wbad := wasmPath(t, "test/testdata/policies/wasi-misbehave")
	pols := fmt.Sprintf(`
trap:
  module: %[1]s
  settings: {behaviour: trap}
oom:
  module: %[1]s
  settings: {behaviour: oom}
wasi-panic:
  module: %[2]s
  settings: {behaviour: panic}
wasi-oom:
  module: %[2]s
  settings: {behaviour: alloc}
grp:
  expression: ok() && boom()
  policies:
    ok: {module: %[1]s}
    boom: {module: %[1]s, settings: {behaviour: trap}}
`, bad, wbad)
	plog := &testfixture.SyncBuffer{}
	l := newTestLoader(t)
	ph, err := policy.NewHost(t.Context(), policy.HostOptions{CacheDir: cacheDir(t), Logger: slog.New(slog.NewTextHandler(plog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ph.Close(context.Background()) })
	l.host.Host = ph
	h := start(t, harnessOpts{policies: pols, loader: l, options: func(o *config.Options) {
		o.Workers = 2
		o.PolicyTimeout = 5 * time.Second
		o.MemoryLimitBytes = 32 << 20
	}})
	for _, tt := range []struct{ id, want string }{
		{"trap", "policy trap: evaluation failed: policy trapped: wasm error: unreachable"},
		{"oom", "policy oom: evaluation failed: policy exceeded its memory limit"},
		{"wasi-panic", "panic: assignment to entry in nil map"},
		{"wasi-oom", "policy wasi-oom: evaluation failed: policy exceeded its memory limit"},
		{"grp", "policy grp: evaluation failed: member boom: policy trapped: wasm error: unreachable"},
	} {
		code, r := h.review("/validate/"+tt.id, reviewFor(tt.id, "CREATE", "default", pod(nil)))
		if code != 200 || r.Allowed || r.Status == nil || r.Status.Code != 500 {
			t.Errorf("%s: HTTP %d %+v, want a 500 rejection", tt.id, code, r)
			continue
		}
		msg := r.Status.Message
		if !strings.Contains(msg, tt.want) {
			t.Errorf("%s: message %q, want it to contain %q", tt.id, msg, tt.want)
		}
		for _, leak := range []string{"\n", "wasm stack trace", "goroutine", "stderr", ".wasm", "0x"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: message carries %q: %q", tt.id, leak, msg)
			}
		}
		if len(msg) > maxUserMessage {
			t.Errorf("%s: message of %d bytes, want at most %d: %q", tt.id, len(msg), maxUserMessage, msg)
		}
	}
	logs := h.logs.String() + plog.String()
	for _, tt := range []struct{ id, logged string }{
		{"trap", "wasm stack trace"},
		{"wasi-panic", "goroutine 1 [running]"},
	} {
		if !strings.Contains(grepLines(logs, "policy="+tt.id), tt.logged) {
			t.Errorf("%s: the server log lacks %q:\n%s", tt.id, tt.logged, grepLines(logs, tt.id))
		}
	}
}

// TestCredentialsNotShown: module URIs with a user:password and credential
// query parameters are fetched with them, but GET /policies (on the
// unauthenticated probe port), the server log and the answers to the
// apiserver show them masked, for a policy that loads, one whose fetch
// fails, and a group member.
func TestCredentialsNotShown(t *testing.T) {
	mod, err := os.ReadFile(wasmPath(t, "test/testdata/policies/misbehave"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"s3cret-pw", "tok-123456", "sig-abcdef", "ghp_lonetoken", "bearer-s3cret", "frag-s3cret", "frag-oktoken", "frag-grptoken"}
	var fetched atomic.Int32
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pw, _ := r.BasicAuth()
		if r.URL.Path == "/ok.wasm" && user == "alice" && pw == "s3cret-pw" && r.URL.Query().Get("token") == "tok-123456" {
			fetched.Add(1)
			w.Write(mod)
			return
		}
		http.Error(w, "no such module", http.StatusNotFound)
	}))
	t.Cleanup(ts.Close)
	host := strings.TrimPrefix(ts.URL, "https://")
	l := newTestLoader(t)
	r := &module.Resolver{HTTPClient: ts.Client()}
	l.host.Resolver = ResolverFunc(func(ctx context.Context, uri string) ([]byte, error) {
		m, err := r.Resolve(ctx, uri)
		if err != nil {
			return nil, err
		}
		return m.Wasm, nil
	})
	pols := fmt.Sprintf(`
ok:
  module: https://alice:s3cret-pw@%[1]s/ok.wasm?token=tok-123456&v=1#frag-oktoken
missing:
  module: https://alice:s3cret-pw@%[1]s/missing.wasm?X-Amz-Signature=sig-abcdef&Bearer=bearer-s3cret#access_token=frag-s3cret
group:
  expression: a()
  policies:
    a: {module: "https://ghp_lonetoken@%[1]s/gone.wasm#frag-grptoken"}
`, host)
	h := start(t, harnessOpts{policies: pols, loader: l})
	if fetched.Load() != 1 {
		t.Fatalf("the module was fetched %d times with its credentials, want 1", fetched.Load())
	}
	_, body := h.get("/policies")
	var shown []string
	for _, id := range []string{"ok", "missing", "group"} {
		p := h.policy(id)
		shown = append(shown, p.Module, p.Error)
		for _, m := range p.Members {
			shown = append(shown, m.Module, m.Error)
		}
	}
	if p := h.policy("ok"); p.State != "ready" || p.Module != "https://alice:xxxxx@"+host+"/ok.wasm?token=xxxxx&v=1#xxxxx" {
		t.Errorf("ok: state %s module %q", p.State, p.Module)
	}
	if p := h.policy("missing"); p.State != "failed" || !strings.Contains(p.Error, "https://alice:xxxxx@"+host+"/missing.wasm?X-Amz-Signature=xxxxx&Bearer=xxxxx#xxxxx") {
		t.Errorf("missing: state %s error %q", p.State, p.Error)
	}
	if p := h.policy("group"); len(p.Members) != 1 || p.Members[0].Module != "https://xxxxx@"+host+"/gone.wasm#xxxxx" {
		t.Errorf("group: %+v", p.Members)
	}
	_, missing := h.review("/validate/missing", reviewFor("m", "CREATE", "default", pod(nil)))
	_, group := h.review("/validate/group", reviewFor("g", "CREATE", "default", pod(nil)))
	if missing.Status == nil || !strings.Contains(missing.Status.Message, "policy missing is not loaded: cannot fetch module") {
		t.Errorf("missing: %+v", missing.Status)
	}
	for where, text := range map[string]string{"GET /policies": body, "the server log": h.logs.String(),
		"the answer for missing": missing.Status.Message, "the answer for group": group.Status.Message} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows %q:\n%s", where, s, grepLines(text, s))
			}
		}
	}
}

// TestPoliciesEndpoint: --policies-endpoint serves GET /policies on the
// probe port (the default, where the operator reads it), on the webhook
// port only (behind its TLS), or nowhere.
func TestPoliciesEndpoint(t *testing.T) {
	for _, tt := range []struct {
		endpoint       string
		probe, webhook int
	}{
		{"", 200, 404},
		{config.PoliciesOnProbe, 200, 404},
		{config.PoliciesOnWebhook, 404, 200},
		{config.PoliciesOff, 404, 404},
	} {
		h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), options: func(o *config.Options) { o.PoliciesEndpoint = tt.endpoint }})
		if code, _ := h.get("/policies"); code != tt.probe {
			t.Errorf("%q: probe port: HTTP %d, want %d", tt.endpoint, code, tt.probe)
		}
		resp, err := h.client.Get(h.base + "/policies")
		if err != nil {
			t.Fatal(err)
		}
		var pl status.Policies
		err = json.NewDecoder(resp.Body).Decode(&pl)
		resp.Body.Close()
		if resp.StatusCode != tt.webhook || tt.webhook == 200 && (err != nil || len(pl.Policies) != 1 || pl.Policies[0].ID != "ok") {
			t.Errorf("%q: webhook port: HTTP %d %+v %v, want %d", tt.endpoint, resp.StatusCode, pl, err, tt.webhook)
		}
	}
}
