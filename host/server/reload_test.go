package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

func reloadPolicies(t testing.TB, label string) string {
	return fmt.Sprintf(`
labels:
  module: %s
  settings: {mandatory_labels: [%s]}
caps:
  module: %s
  allowedToMutate: true
`, wasmPath(t, "examples/required-labels"), label, wasmPath(t, "examples/capabilities-drop"))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, like an editor or a ConfigMap swap
		t.Fatal(err)
	}
}

// TestHotReloadUnderLoad rewrites policies.yml while clients hammer the
// server: no request may fail, verdicts follow the new settings, the
// unchanged policy is never reloaded, and retired policies are closed.
func TestHotReloadUnderLoad(t *testing.T) {
	l := newTestLoader(t)
	h := start(t, harnessOpts{policies: reloadPolicies(t, "owner"), loader: l, watch: true})
	if got := l.loads.Load(); got != 2 {
		t.Fatalf("initial loads = %d", got)
	}
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				path := "/validate/labels"
				body := reviewFor(fmt.Sprintf("w%d-%d", i, n), "CREATE", "default", pod(map[string]string{"owner": "x", "team": "y"}))
				if i%2 == 1 {
					path = "/validate/caps"
					body = reviewFor(fmt.Sprintf("w%d-%d", i, n), "CREATE", "default", pod(nil, "NET_ADMIN"))
				}
				resp, err := h.client.Post(h.base+path, "application/json", strings.NewReader(string(body)))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				var rv admission.Review
				err = json.NewDecoder(resp.Body).Decode(&rv)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || rv.Response == nil || !rv.Response.Allowed {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("HTTP %d %v %+v", resp.StatusCode, err, rv.Response))
					continue
				}
				ok.Add(1)
			}
		}(i)
	}
	labels := []string{"team", "owner", "team", "owner", "team"}
	for i, lb := range labels {
		time.Sleep(300 * time.Millisecond)
		writeFile(t, h.pfile, reloadPolicies(t, lb))
		deadline := time.Now().Add(10 * time.Second)
		for h.srv.cur.Load().gen != uint64(i+2) {
			if time.Now().After(deadline) {
				t.Fatalf("reload %d not applied; generation %d; log:\n%s", i+1, h.srv.cur.Load().gen, h.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed during reloads; first: %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 100 {
		t.Fatalf("only %d requests went through", ok.Load())
	}
	// 2 at start + one per reload for the changed policy; caps was reused.
	if got := l.loads.Load(); got != int64(2+len(labels)) {
		t.Errorf("loads = %d, want %d (unchanged policies must not be reloaded)", got, 2+len(labels))
	}
	// the final settings apply
	if _, r := h.review("/validate/labels", reviewFor("final", "CREATE", "default", pod(map[string]string{"owner": "x"}))); r.Allowed || !strings.Contains(r.Status.Message, `"team"`) {
		t.Errorf("after reloads: %+v", r.Status)
	}
	// retired policies are closed (all instances gone), the serving ones are not
	time.Sleep(200 * time.Millisecond)
	serving := map[Evaluator]bool{}
	for _, u := range h.srv.cur.Load().units {
		serving[u.eval] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	closed := 0
	for _, ev := range l.evals {
		p, ok := ev.(interface{ Instances() (int, int) })
		if !ok {
			continue
		}
		live, _ := p.Instances()
		if serving[ev] && live == 0 {
			t.Errorf("a serving policy has no instances")
		}
		if !serving[ev] {
			if live != 0 {
				t.Errorf("a retired policy still has %d instances", live)
			}
			closed++
		}
	}
	if closed != len(labels) {
		t.Errorf("%d retired policies, want %d", closed, len(labels))
	}
	t.Logf("%d requests, 0 failed, across %d reloads", ok.Load(), len(labels))
}

// TestInvalidReloadKeepsServing: a file that does not parse or validate is
// rejected as a whole; /policies keeps the serving file's digest and shows
// the rejected one's in lastReload.
func TestInvalidReloadKeepsServing(t *testing.T) {
	l := newTestLoader(t)
	h := start(t, harnessOpts{policies: reloadPolicies(t, "owner"), loader: l})
	served := status.Digest([]byte(reloadPolicies(t, "owner")))
	good := reviewFor("g", "CREATE", "default", pod(map[string]string{"owner": "x"}))
	for _, tt := range []struct{ name, content, wantErr string }{
		{"YAML syntax", "labels: [", "malformed YAML"},
		{"invalid field", "labels: {module: x, policyMode: loud}", `field policyMode: value "loud"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, h.pfile, tt.content)
			err := h.srv.Reload(context.Background(), "test", false)
			if !errors.Is(err, ErrReload) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Reload error = %v, want ErrReload and %q", err, tt.wantErr)
			}
			if _, r := h.review("/validate/labels", good); !r.Allowed {
				t.Fatalf("old configuration no longer serves: %+v", r.Status)
			}
			pl := h.policies()
			if pl.Generation != 1 || pl.ConfigDigest != served || pl.LastReload.OK || !strings.Contains(pl.LastReload.Error, tt.wantErr) ||
				pl.LastReload.Digest != status.Digest([]byte(tt.content)) {
				t.Fatalf("/policies after a bad reload: %+v", pl)
			}
		})
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_config_reloads_total{outcome="failure"} 2`) {
		t.Errorf("failure metric missing")
	}
	// a good configuration afterwards is applied; an unchanged file is a no-op
	writeFile(t, h.pfile, reloadPolicies(t, "team"))
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	_, metrics = h.get("/metrics")
	for _, want := range []string{`tollgate_config_reloads_total{outcome="success"} 1`, `tollgate_config_reloads_total{outcome="unchanged"} 1`, "tollgate_config_generation 2"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if _, r := h.review("/validate/labels", good); r.Allowed {
		t.Fatal("new settings not applied")
	}
}

// TestInFlightFinishOnOldSet: a request that started before a reload
// finishes on the policy it started with, which is closed only afterwards.
func TestInFlightFinishOnOldSet(t *testing.T) {
	l := newTestLoader(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	l.scripts["slow"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		started <- struct{}{}
		<-release
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	l.scripts["fast"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: false, Message: strp("new set")}, nil
	}
	h := start(t, harnessOpts{policies: "p:\n  module: script://slow\n", loader: l})
	done := make(chan *admission.Response)
	go func() {
		_, r := h.review("/validate/p", reviewFor("old", "CREATE", "default", pod(nil)))
		done <- r
	}()
	<-started
	writeFile(t, h.pfile, "p:\n  module: script://fast\n")
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	if _, r := h.review("/validate/p", reviewFor("new", "CREATE", "default", pod(nil))); r.Allowed {
		t.Fatal("new request not served by the new set")
	}
	old := l.evals[0].(*scripted)
	if old.closed.Load() {
		t.Fatal("old policy closed while a request is in flight")
	}
	close(release)
	if r := <-done; !r.Allowed || r.UID != "old" {
		t.Fatalf("in-flight request: %+v", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !old.closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("old policy not closed after its last request")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSharedPolicyClosedAfterAllSetsDrain: a policy shared by two
// consecutive sets and dropped by the third is closed only once the oldest
// set using it finished its requests, even if the middle set drained first.
func TestSharedPolicyClosedAfterAllSetsDrain(t *testing.T) {
	l := newTestLoader(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	l.scripts["slow"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		started <- struct{}{}
		<-release
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	l.scripts["other"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	h := start(t, harnessOpts{policies: "p:\n  module: script://slow\n", loader: l})
	done := make(chan *admission.Response)
	go func() {
		_, r := h.review("/validate/p", reviewFor("A", "CREATE", "default", pod(nil)))
		done <- r
	}()
	<-started
	// B keeps p (reused) and adds q; C drops p.
	writeFile(t, h.pfile, "p:\n  module: script://slow\nq:\n  module: script://other\n")
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, h.pfile, "q:\n  module: script://other\n")
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	slow := l.evals[0].(*scripted)
	if slow.closed.Load() {
		t.Fatal("policy closed while the oldest set still runs a request on it")
	}
	close(release)
	if r := <-done; !r.Allowed {
		t.Fatalf("in-flight request: %+v", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slow.closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("policy never closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailedPolicyRetried: a policy whose module was missing at start is
// loaded by the periodic retry once the module appears, without a restart,
// a signal or a change of policies.yml.
func TestFailedPolicyRetried(t *testing.T) {
	dir := t.TempDir()
	late := dir + "/late.wasm"
	// "broken" never loads; it must not keep "late" from recovering
	pols := fmt.Sprintf("good:\n  module: %s\n  settings: {mandatory_labels: [owner]}\nlate:\n  module: %s\n  settings: {mandatory_labels: [owner]}\nbroken:\n  module: /nonexistent/policy.wasm\n",
		wasmPath(t, "examples/required-labels"), late)
	h := start(t, harnessOpts{policies: pols, retry: 100 * time.Millisecond})
	body := reviewFor("r", "CREATE", "default", pod(map[string]string{"owner": "x"}))
	if code, r := h.review("/validate/late", body); code != 500 || r.Allowed {
		t.Fatalf("late before its module exists: HTTP %d %+v", code, r)
	}
	time.Sleep(300 * time.Millisecond) // a few failed retries, with backoff
	if code, r := h.review("/validate/good", body); code != 200 || !r.Allowed {
		t.Fatalf("good policy during retries: HTTP %d", code)
	}
	b, err := os.ReadFile(wasmPath(t, "examples/required-labels"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(late, b, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, r := h.review("/validate/late", body)
		if code == 200 && r.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("late policy never loaded: HTTP %d %+v\n%s", code, r.Status, h.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_policy_loaded{policy="late"} 1`) || !strings.Contains(metrics, `tollgate_policy_loaded{policy="broken"} 0`) {
		t.Errorf("load states:\n%s", grepLines(metrics, "policy_loaded"))
	}
	// later retries that change nothing do not swap the set
	gen := h.srv.cur.Load().gen
	time.Sleep(800 * time.Millisecond)
	if g := h.srv.cur.Load().gen; g != gen {
		t.Errorf("generation moved from %d to %d on retries that changed nothing", gen, g)
	}
	_, metrics = h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_config_reloads_total{outcome="unchanged"}`) {
		t.Errorf("no unchanged retries counted:\n%s", grepLines(metrics, "reloads_total"))
	}
}

// TestReloadFixesOnePolicyWhileAnotherStaysBroken: a reload that fixes a
// policy is applied although another policy is still failing as before;
// breaking the fixed one again leaves it serving, stale.
func TestReloadFixesOnePolicyWhileAnotherStaysBroken(t *testing.T) {
	labels := wasmPath(t, "examples/required-labels")
	h := start(t, harnessOpts{policies: "a:\n  module: /nonexistent/a.wasm\nb:\n  module: /nonexistent/b.wasm\n"})
	writeFile(t, h.pfile, fmt.Sprintf("a:\n  module: %s\n  settings: {mandatory_labels: [owner]}\nb:\n  module: /nonexistent/b.wasm\n", labels))
	if err := h.srv.Reload(context.Background(), "test", false); !errors.Is(err, ErrPolicyLoad) || !strings.Contains(err.Error(), "policy b") || strings.Contains(err.Error(), "policy a") {
		t.Fatalf("reload fixing a: %v", err)
	}
	if code, r := h.review("/validate/a", reviewFor("a", "CREATE", "default", pod(map[string]string{"owner": "x"}))); code != 200 || !r.Allowed {
		t.Fatalf("a after the fix: HTTP %d", code)
	}
	if code, _ := h.review("/validate/b", reviewFor("b", "CREATE", "default", pod(nil))); code != 500 {
		t.Fatalf("b: HTTP %d, want 500", code)
	}
	// breaking a again leaves its loaded version serving: a reload may not
	// make things worse
	writeFile(t, h.pfile, "a:\n  module: /nonexistent/a.wasm\nb:\n  module: /nonexistent/b.wasm\n")
	if err := h.srv.Reload(context.Background(), "test", false); !errors.Is(err, ErrPolicyLoad) || !strings.Contains(err.Error(), "policy a (previous version serving)") {
		t.Fatalf("reload breaking a: %v", err)
	}
	if code, r := h.review("/validate/a", reviewFor("a", "CREATE", "default", pod(map[string]string{"owner": "x"}))); code != 200 || !r.Allowed {
		t.Fatalf("a after breaking it again: HTTP %d", code)
	}
	if p := h.policy("a"); p.State != status.StateReady || !p.Stale || !strings.Contains(p.Error, "/nonexistent/a.wasm") {
		t.Fatalf("a after breaking it again: %+v", p)
	}
}
