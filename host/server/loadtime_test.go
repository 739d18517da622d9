package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// stuckLoader is a testLoader whose loads of the ids in stuck do not return
// until release is closed, whatever their context says: a compilation
// wazero cannot interrupt, or a start function nothing cuts.
type stuckLoader struct {
	*testLoader
	stuck   map[string]bool
	release chan struct{}
	started chan string
}

func newStuckLoader(t *testing.T, ids ...string) *stuckLoader {
	l := &stuckLoader{testLoader: acceptAll(t), stuck: map[string]bool{}, release: make(chan struct{}), started: make(chan string, 16)}
	for _, id := range ids {
		l.stuck[id] = true
	}
	t.Cleanup(func() {
		select {
		case <-l.release:
		default:
			close(l.release)
		}
	})
	return l
}

func (l *stuckLoader) Load(ctx context.Context, spec policy.Spec) (Evaluator, error) {
	if l.stuck[spec.ID] {
		select {
		case l.started <- spec.ID:
		default:
		}
		<-l.release // deaf to ctx
	}
	return l.testLoader.Load(ctx, spec)
}

// begin opens, starts loading and starts h's server without waiting for its
// policies, as serve does.
func begin(t *testing.T, ho harnessOpts) *harness {
	t.Helper()
	h := openProbing(t, ho)
	if err := h.srv.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.base = "https://" + h.srv.Addr()
	h.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca}}}
	return h
}

// answer is the HTTP status of a review of id, and whether it was allowed.
func (h *harness) answer(id string) (int, bool) {
	h.t.Helper()
	code, resp := h.review("/validate/"+id, reviewFor("u1", "CREATE", "default", pod(nil)))
	return code, resp.Allowed
}

// TestStuckLoadAtStart: a policy whose load never returns (deaf to its context) holds back
// nothing but itself. The healthy policy answers at once while it loads (503 for it, with
// /readiness 503 saying so), and at --policy-load-timeout it is failed with the reason; then
// /readiness is 200 and its endpoint answers 500. Before, the webhook port opened only once
// every load had ended: never, with readiness 503 forever.
func TestStuckLoadAtStart(t *testing.T) {
	l := newStuckLoader(t, "stuck")
	const deadline = 3 * time.Second
	start := time.Now()
	h := begin(t, harnessOpts{policies: "fast:\n  module: script://ok\nstuck:\n  module: script://ok\n", loader: l,
		options: func(o *config.Options) { o.PolicyLoadTimeout = deadline }})
	<-l.started
	if code, allowed := h.answer("fast"); code != 200 || !allowed {
		t.Fatalf("fast while stuck loads: HTTP %d allowed %v", code, allowed)
	}
	if took := time.Since(start); took >= deadline {
		t.Fatalf("fast answered after %v, not before the stuck load's deadline", took)
	}
	if code, resp := h.review("/validate/stuck", reviewFor("u2", "CREATE", "default", pod(nil))); code != 503 || resp.Allowed ||
		resp.Status == nil || !strings.Contains(resp.Status.Message, "still loading") {
		t.Errorf("stuck while loading: HTTP %d %+v", code, resp.Status)
	}
	if code, body := h.get("/readiness"); code != 503 || body != "loading: 1 of 2 policies\n" {
		t.Errorf("/readiness while stuck loads: %d %q", code, body)
	}
	if p := h.policy("stuck"); p.State != status.StateLoading {
		t.Errorf("/policies stuck while loading: %+v", p)
	}
	eventually(t, "stuck failed at its deadline", func() string {
		if p := h.policy("stuck"); p.State != status.StateFailed || !strings.Contains(p.Error, "--policy-load-timeout") {
			return fmt.Sprintf("%+v", p)
		}
		return ""
	})
	if took := time.Since(start); took < deadline {
		t.Errorf("stuck failed after %v, before its deadline %v", took, deadline)
	}
	if code, body := h.get("/readiness"); code != 200 {
		t.Errorf("/readiness once stuck failed: %d %q", code, body)
	}
	if code, resp := h.review("/validate/stuck", reviewFor("u3", "CREATE", "default", pod(nil))); code != 500 || resp.Allowed {
		t.Errorf("stuck once failed: HTTP %d %+v", code, resp.Status)
	}
	if code, allowed := h.answer("fast"); code != 200 || !allowed {
		t.Errorf("fast after: HTTP %d allowed %v", code, allowed)
	}
	// What the stuck load returns late is closed, not leaked.
	close(l.release)
	eventually(t, "the late evaluator closed", func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		closed := 0
		for _, ev := range l.evals {
			if ev.(*scripted).closed.Load() {
				closed++
			}
		}
		if len(l.evals) != 2 || closed != 1 {
			return fmt.Sprintf("%d evaluators, %d closed", len(l.evals), closed)
		}
		return ""
	})
}

// TestReloadWhileLoadStuck: a reload adopted while an earlier reload's load is stuck takes
// effect at once (a new policy answers, a removed one is gone), and Shutdown ends within its
// timeout with the load still running. Before, every later reload waited for the stuck one
// (a new policy answered 404 for as long as it lasted) and Shutdown never returned.
func TestReloadWhileLoadStuck(t *testing.T) {
	l := newStuckLoader(t, "stuck")
	h := start(t, harnessOpts{policies: okPolicies, loader: l, options: func(o *config.Options) { o.PolicyLoadTimeout = 10 * time.Minute }})
	write := func(s string) {
		if err := os.WriteFile(h.pfile, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reloaded := make(chan error, 2)
	write(okPolicies + "stuck:\n  module: script://ok\n")
	go func() { reloaded <- h.srv.Reload(context.Background(), "SIGHUP", true) }()
	<-l.started
	eventually(t, "stuck answers 503 while it loads", func() string {
		if code, _ := h.post("/validate/stuck", reviewFor("u1", "CREATE", "default", pod(nil))); code != 503 {
			return fmt.Sprintf("HTTP %d", code)
		}
		return ""
	})
	write(okPolicies + "stuck:\n  module: script://ok\nadded:\n  module: script://ok\n")
	go func() { reloaded <- h.srv.Reload(context.Background(), "SIGHUP", true) }()
	if err := <-reloaded; !errors.Is(err, ErrSuperseded) {
		t.Errorf("the first reload: %v, want ErrSuperseded", err)
	}
	eventually(t, "added answers while stuck loads", func() string {
		if code, _ := h.post("/validate/added", reviewFor("u2", "CREATE", "default", pod(nil))); code != 200 {
			return fmt.Sprintf("HTTP %d", code)
		}
		return ""
	})
	if code, allowed := h.answer("ok"); code != 200 || !allowed {
		t.Errorf("ok: HTTP %d allowed %v", code, allowed)
	}
	if got := l.loads.Load(); got != 2 { // ok, added: the stuck one is loaded once for both reloads
		t.Errorf("%d loads returned, want 2", got)
	}

	// The stuck load never ends by itself (its deadline is 10 minutes): a Shutdown that waited
	// for it would end with the context's error. The ceiling is generous for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with a stuck load: %v after %v", err, time.Since(t0))
	}
	select {
	case err := <-reloaded:
		if err == nil || errors.Is(err, ErrPolicyLoad) {
			t.Errorf("the second reload ended with %v at shutdown", err)
		}
	case <-time.After(time.Minute):
		t.Error("the reload waiting for the stuck load did not return at shutdown")
	}
}

// TestEmptyPoliciesFileKeepsServing: an empty (or comment-only, or null) policies.yml is
// rejected as a whole: the last good configuration keeps serving, /policies' lastReload and
// tollgate_config_last_reload_rejected say so; `{}` serves no policy. Before, an empty file
// was adopted as "no policies": every endpoint answered 404 with lastReload.ok true.
func TestEmptyPoliciesFileKeepsServing(t *testing.T) {
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t)})
	for _, content := range []string{"", "\n  \n", "# all policies moved\n", "~\n", "null\n"} {
		if err := os.WriteFile(h.pfile, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.srv.Reload(context.Background(), "file", false); !errors.Is(err, ErrReload) {
			t.Errorf("%q: reload %v, want ErrReload", content, err)
		}
		if code, allowed := h.answer("ok"); code != 200 || !allowed {
			t.Errorf("%q: ok answered HTTP %d allowed %v", content, code, allowed)
		}
		pl := h.policies()
		if pl.LastReload.OK || !strings.Contains(pl.LastReload.Error, "{}") || len(pl.Policies) != 1 {
			t.Errorf("%q: /policies %+v", content, pl)
		}
		if _, m := h.get("/metrics"); !strings.Contains(m, "tollgate_config_last_reload_rejected 1\n") {
			t.Errorf("%q: tollgate_config_last_reload_rejected is not 1", content)
		}
	}
	if err := os.WriteFile(h.pfile, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Reload(context.Background(), "file", false); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.post("/validate/ok", reviewFor("u", "CREATE", "default", pod(nil))); code != 404 {
		t.Errorf("after {}: ok answered HTTP %d, want 404", code)
	}
	if _, m := h.get("/metrics"); !strings.Contains(m, "tollgate_config_last_reload_rejected 0\n") {
		t.Error("after {}: tollgate_config_last_reload_rejected is not 0")
	}
}

// TestTruncateThenWriteUnderLoad: an editor (or `gen > policies.yml`) that empties the
// watched file before it writes the new content, again and again, sometimes slower than the
// watch's debounce, fails no request to a policy both versions keep. Before, each empty read
// was adopted as "no policies": 404s (6,193 of 20,277 requests across 10 edits).
func TestTruncateThenWriteUnderLoad(t *testing.T) {
	versions := []string{
		okPolicies,
		okPolicies + "other:\n  module: script://ok\n  settings: {v: 1}\n",
		okPolicies + "other:\n  module: script://ok\n  settings: {v: 2}\n",
	}
	h := start(t, harnessOpts{policies: versions[0], loader: acceptAll(t), watch: true})
	h.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 8
	var sent, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := reviewFor(fmt.Sprint("c", c), "CREATE", "default", pod(nil))
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := h.client.Post(h.base+"/validate/ok", "application/json", strings.NewReader(string(body)))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprint("HTTP ", resp.StatusCode))
				}
			}
		}()
	}
	for i := range 12 {
		f, err := os.OpenFile(h.pfile, os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		// Every third edit stays empty longer than the watch's debounce (200 ms).
		gap := 20 * time.Millisecond
		if i%3 == 0 {
			gap = 600 * time.Millisecond
		}
		time.Sleep(gap)
		if _, err := f.WriteString(versions[(i+1)%len(versions)]); err != nil {
			t.Fatal(err)
		}
		f.Close()
		time.Sleep(300 * time.Millisecond)
	}
	// The last version is adopted (a rejected read is retried).
	want := status.Digest([]byte(versions[12%len(versions)]))
	eventually(t, "the last version adopted", func() string {
		if pl := h.policies(); pl.ConfigDigest != want {
			return fmt.Sprintf("serving %s, last reload %+v", pl.ConfigDigest, pl.LastReload)
		}
		return ""
	})
	close(stop)
	wg.Wait()
	if !strings.Contains(h.logs.String(), "configuration rejected") {
		t.Error("no empty read was seen: the test did not test anything")
	}
	t.Logf("%d requests, %d failed", sent.Load(), failed.Load())
	if failed.Load() != 0 || sent.Load() < 50 {
		t.Errorf("%d of %d requests failed (first: %v)", failed.Load(), sent.Load(), firstFailure.Load())
	}
}

// TestIdleConnectionsDoNotLockOut: with --max-connections 64 and 64 keep-alive TLS
// connections that each sent one request and then sit idle (HTTP/1.1, and HTTP/2 with no
// open stream), a new client is answered within 4 s: the longest-idle connection makes room.
// Before, a listener-level limit counted idle connections like busy ones, and new clients
// waited for the 90 s idle timeout.
func TestIdleConnectionsDoNotLockOut(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "http2"}[h2], func(t *testing.T) {
			const limit = 64
			h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), options: func(o *config.Options) { o.MaxConnections = limit }})
			newClient := func() *http.Client {
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca}, ForceAttemptHTTP2: h2, MaxIdleConnsPerHost: 1}
				t.Cleanup(tr.CloseIdleConnections)
				return &http.Client{Timeout: 4 * time.Second, Transport: tr}
			}
			body := string(reviewFor("u", "CREATE", "default", pod(nil)))
			send := func(c *http.Client) error {
				resp, err := c.Post(h.base+"/validate/ok", "application/json", strings.NewReader(body))
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				io.Copy(io.Discard, resp.Body) // read to its end: the connection stays open, idle
				if resp.StatusCode != 200 {
					return fmt.Errorf("HTTP %d", resp.StatusCode)
				}
				if h2 != (resp.ProtoMajor == 2) {
					return fmt.Errorf("answered over %s", resp.Proto)
				}
				return nil
			}
			for i := range limit {
				if err := send(newClient()); err != nil {
					t.Fatalf("holder %d: %v", i, err)
				}
			}
			t0 := time.Now()
			if err := send(newClient()); err != nil {
				t.Fatalf("a new client beside %d idle connections: %v after %v", limit, err, time.Since(t0))
			}
			t.Logf("the new client was answered in %v", time.Since(t0))
			if _, m := h.get("/metrics"); !strings.Contains(m, "tollgate_server_idle_connections_closed_total 1\n") {
				t.Errorf("metrics:\n%s", grepLines(m, "tollgate_server_idle_connections"))
			}
		})
	}
}

// TestEmptyConfigMapKeyKeepsServing: the ConfigMap's policies.yml delivered empty through
// the API is rejected as an empty file is: the last content keeps serving, lastReload says
// why; `{}` serves nothing. Before, it was adopted as "no policies" (404 everywhere).
func TestEmptyConfigMapKeyKeepsServing(t *testing.T) {
	api := newFakeAPI()
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), api: api.source})
	api.updates <- okPolicies + "other:\n  module: script://ok\n"
	waitDigest(t, h, status.Digest([]byte(okPolicies+"other:\n  module: script://ok\n")), "the API's content")
	eventually(t, "other loaded", func() string {
		if p := h.policy("other"); p.State != status.StateReady {
			return fmt.Sprintf("%+v", p)
		}
		return ""
	})
	api.updates <- ""
	eventually(t, "the empty content rejected", func() string {
		if pl := h.policies(); pl.LastReload.OK || !strings.Contains(pl.LastReload.Error, "empty") {
			return fmt.Sprintf("last reload %+v", pl.LastReload)
		}
		return ""
	})
	for _, id := range []string{"ok", "other"} {
		if code, allowed := h.answer(id); code != 200 || !allowed {
			t.Errorf("%s after the empty content: HTTP %d allowed %v", id, code, allowed)
		}
	}
	api.updates <- "{}"
	waitDigest(t, h, status.Digest([]byte("{}")), "{}")
	if code, _ := h.post("/validate/ok", reviewFor("u", "CREATE", "default", pod(nil))); code != 404 {
		t.Errorf("after {}: HTTP %d, want 404", code)
	}
}

// openProbing opens a server for ho with its probe port serving, before any
// configuration is loaded.
func openProbing(t *testing.T, ho harnessOpts) *harness {
	t.Helper()
	h, so := prepare(t, ho)
	srv, err := Open(so)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	if err := srv.ServeProbes(); err != nil {
		t.Fatal(err)
	}
	h.serving()
	return h
}
