package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// verdictLoader serves script://ok and script://deny; any other script
// fails to load ("no script").
func verdictLoader(t testing.TB) *testLoader {
	l := acceptAll(t)
	l.scripts["deny"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: false, Message: strp("denied by the new version")}, nil
	}
	return l
}

// TestReloadPerPolicy: a reload is atomic per policy (a group is one unit).
// A policy whose new version fails keeps serving its loaded version (stale),
// a new or already failed policy that fails is failed, the rest of the file
// is adopted, and only a file that does not parse is rejected whole.
func TestReloadPerPolicy(t *testing.T) {
	type want struct {
		code    int    // HTTP status of /validate/{id}
		allowed bool   // its verdict
		state   string // in /policies
		stale   bool
		err     string // substring of the policy's error in /policies ("" = none)
	}
	group := func(b string) string {
		return "g:\n  expression: a() && b()\n  policies:\n    a: {module: script://ok}\n    b: {module: " + b + "}\n"
	}
	labels := wasmPath(t, "examples/required-labels")
	for _, tt := range []struct {
		name, before, after string
		wantErr             error // of Reload: nil, ErrPolicyLoad or ErrReload
		want                map[string]want
	}{
		{
			name:    "new policy fails: adopted, failed, the other edits apply",
			before:  "p:\n  module: script://ok\n",
			after:   "p:\n  module: script://deny\nq:\n  module: script://missing\n",
			wantErr: ErrPolicyLoad,
			want: map[string]want{
				"p": {200, false, status.StateReady, false, ""},
				"q": {500, false, status.StateFailed, false, `no script "missing"`},
			},
		},
		{
			name:    "ready policy's new version fails: the old version (module and mode) serves, stale",
			before:  "p:\n  module: script://deny\nr:\n  module: script://ok\n",
			after:   "p:\n  module: script://missing\n  policyMode: monitor\nr:\n  module: script://deny\n",
			wantErr: ErrPolicyLoad,
			want: map[string]want{
				"p": {200, false, status.StateReady, true, `no script "missing"`},
				"r": {200, false, status.StateReady, false, ""},
			},
		},
		{
			name:    "ready policy's new settings rejected: the old settings serve, stale",
			before:  fmt.Sprintf("p:\n  module: %s\n  settings: {mandatory_labels: [owner]}\n", labels),
			after:   fmt.Sprintf("p:\n  module: %s\n  settings: {mandatory_labels: 3}\n", labels),
			wantErr: ErrPolicyLoad,
			want: map[string]want{
				"p": {200, true, status.StateReady, true, "settings"},
			},
		},
		{
			name:    "group with a failing new member: the old group serves as one unit",
			before:  group("script://ok"),
			after:   group("script://missing"),
			wantErr: ErrPolicyLoad,
			want: map[string]want{
				"g": {200, true, status.StateReady, true, `member b: no script "missing"`},
			},
		},
		{
			name:    "new group with a failing member: failed",
			before:  "p:\n  module: script://ok\n",
			after:   "p:\n  module: script://ok\n" + group("script://missing"),
			wantErr: ErrPolicyLoad,
			want: map[string]want{
				"p": {200, true, status.StateReady, false, ""},
				"g": {500, false, status.StateFailed, false, `member b: no script "missing"`},
			},
		},
		{
			name:    "failed policy fails again: failed, with the new error",
			before:  "p:\n  module: script://gone\n",
			after:   "p:\n  module: script://missing\n",
			wantErr: ErrPolicyLoad,
			want: map[string]want{
				"p": {500, false, status.StateFailed, false, `no script "missing"`},
			},
		},
		{
			name:   "failed policy fixed: current",
			before: "p:\n  module: script://gone\n",
			after:  "p:\n  module: script://deny\n",
			want: map[string]want{
				"p": {200, false, status.StateReady, false, ""},
			},
		},
		{
			name:    "file does not parse: rejected whole",
			before:  "p:\n  module: script://ok\n",
			after:   "p:\n  module: script://deny\nq: [\n",
			wantErr: ErrReload,
			want: map[string]want{
				"p": {200, true, status.StateReady, false, ""},
			},
		},
		{
			name:    "file does not validate: rejected whole",
			before:  "p:\n  module: script://ok\n",
			after:   "p:\n  module: script://deny\nq:\n  module: script://ok\n  policyMode: loud\n",
			wantErr: ErrReload,
			want: map[string]want{
				"p": {200, true, status.StateReady, false, ""},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, harnessOpts{policies: tt.before, loader: verdictLoader(t)})
			writeFile(t, h.pfile, tt.after)
			err := h.srv.Reload(context.Background(), "test", false)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Reload: %v, want %v", err, tt.wantErr)
			}
			pl := h.policies()
			adopted := !errors.Is(tt.wantErr, ErrReload)
			wantDigest, wantGen := status.Digest([]byte(tt.before)), uint64(1)
			if adopted {
				wantDigest, wantGen = status.Digest([]byte(tt.after)), 2
			}
			if pl.ConfigDigest != wantDigest || pl.Generation != wantGen || pl.LastReload.OK != adopted ||
				pl.LastReload.Digest != status.Digest([]byte(tt.after)) || (pl.LastReload.Error != "") == adopted {
				t.Errorf("/policies: configDigest %s generation %d lastReload %+v; want configDigest %s (adopted %v)",
					pl.ConfigDigest, pl.Generation, pl.LastReload, wantDigest, adopted)
			}
			for id, w := range tt.want {
				code, r := h.review("/validate/"+id, reviewFor(id, "CREATE", "default", pod(map[string]string{"owner": "x"})))
				if code != w.code || r.Allowed != w.allowed {
					t.Errorf("%s: HTTP %d allowed %v, want HTTP %d allowed %v (%+v)", id, code, r.Allowed, w.code, w.allowed, r.Status)
				}
				p := h.policy(id)
				if p.State != w.state || p.Stale != w.stale || (w.err == "") != (p.Error == "") || !strings.Contains(p.Error, w.err) {
					t.Errorf("%s in /policies: state %q stale %v error %q; want %q %v %q", id, p.State, p.Stale, p.Error, w.state, w.stale, w.err)
				}
				if serr := pl.Serves(status.Digest([]byte(tt.after)), id); (serr == nil) != (adopted && w.state == status.StateReady && !w.stale) {
					t.Errorf("%s: Serves = %v", id, serr)
				}
			}
		})
	}
}

// TestStalePolicyRetried: a policy whose new version fails to load serves
// its previous version, is retried like a failed policy, and becomes
// current once its new module appears; metrics follow.
func TestStalePolicyRetried(t *testing.T) {
	labels := wasmPath(t, "examples/required-labels")
	late := filepath.Join(t.TempDir(), "late.wasm")
	h := start(t, harnessOpts{policies: fmt.Sprintf("p:\n  module: %s\n  settings: {mandatory_labels: [owner]}\n", labels), retry: 100 * time.Millisecond})
	next := fmt.Sprintf("p:\n  module: %s\n  settings: {mandatory_labels: [team]}\n", late)
	writeFile(t, h.pfile, next)
	if err := h.srv.Reload(context.Background(), "test", false); !errors.Is(err, ErrPolicyLoad) {
		t.Fatalf("Reload: %v", err)
	}
	ownerOnly := reviewFor("r", "CREATE", "default", pod(map[string]string{"owner": "x"}))
	if code, r := h.review("/validate/p", ownerOnly); code != 200 || !r.Allowed {
		t.Fatalf("stale p must serve the old settings: HTTP %d %+v", code, r.Status)
	}
	_, metrics := h.get("/metrics")
	for _, want := range []string{`tollgate_policy_stale{policy="p"} 1`, `tollgate_policy_loaded{policy="p"} 1`, `tollgate_config_reloads_total{outcome="partial"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "tollgate_"))
		}
	}
	b, err := os.ReadFile(labels)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(late, b, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.policy("p").Stale {
		if time.Now().After(deadline) {
			t.Fatalf("stale policy not retried: %+v", h.policy("p"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, r := h.review("/validate/p", ownerOnly); code != 200 || r.Allowed {
		t.Fatalf("p after the retry must use the new settings: HTTP %d allowed %v", code, r.Allowed)
	}
	pl := h.policies()
	if err := pl.Serves(status.Digest([]byte(next)), "p"); err != nil || pl.LastReload.Trigger != "retry" {
		t.Fatalf("after the retry: %v %+v", err, pl.LastReload)
	}
	_, metrics = h.get("/metrics")
	for _, want := range []string{`tollgate_policy_stale{policy="p"} 0`, `tollgate_config_reloads_total{outcome="success"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "tollgate_"))
		}
	}
}

// TestStaleUnitsSharedAndClosed: the old unit a stale policy keeps serving
// is not closed when the set it came from retires, and is closed once a
// later set no longer uses it.
func TestStaleUnitsSharedAndClosed(t *testing.T) {
	l := verdictLoader(t)
	h := start(t, harnessOpts{policies: "p:\n  module: script://ok\n", loader: l})
	for _, f := range []string{"p:\n  module: script://missing\n", "p:\n  module: script://missing\n  policyMode: monitor\n"} {
		writeFile(t, h.pfile, f)
		if err := h.srv.Reload(context.Background(), "test", false); !errors.Is(err, ErrPolicyLoad) {
			t.Fatalf("Reload: %v", err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	old := l.evals[0].(*scripted)
	if old.closed.Load() {
		t.Fatal("the unit a stale policy serves was closed")
	}
	if code, r := h.review("/validate/p", reviewFor("r", "CREATE", "default", pod(nil))); code != 200 || !r.Allowed {
		t.Fatalf("stale p: HTTP %d", code)
	}
	writeFile(t, h.pfile, "p:\n  module: script://deny\n")
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !old.closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the old unit was never closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
