package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// blocking returns a loader whose policy "block" waits until release is
// closed, signalling on started.
func blocking(t testing.TB) (*testLoader, chan struct{}, chan struct{}) {
	l := newTestLoader(t)
	release := make(chan struct{})
	started := make(chan struct{}, 100)
	l.scripts["block"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		started <- struct{}{}
		<-release
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	l.scripts["ok"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	return l, release, started
}

// TestOverloadIsAnswered: with 1 worker and a queue of 1, a third concurrent
// request gets 503 at once instead of waiting.
func TestOverloadIsAnswered(t *testing.T) {
	l, release, started := blocking(t)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\nok:\n  module: script://ok\n", loader: l, options: func(o *config.Options) {
		o.Workers, o.QueueSize = 1, 1
	}})
	codes := make(chan int, 2)
	var wg sync.WaitGroup
	send := func(uid string) {
		defer wg.Done()
		code, _ := h.post("/validate/block", reviewFor(uid, "CREATE", "d", pod(nil)))
		codes <- code
	}
	wg.Add(1)
	go send("running")
	<-started
	wg.Add(1)
	go send("queued")
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.lim.queued() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("second request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t0 := time.Now()
	code, body := h.post("/validate/ok", reviewFor("rejected", "CREATE", "d", pod(nil)))
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "overloaded") || time.Since(t0) > time.Second {
		t.Fatalf("third request: HTTP %d %s after %v", code, body, time.Since(t0))
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("running/queued request: HTTP %d", c)
		}
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, "tollgate_server_overload_rejections_total 1") {
		t.Errorf("overload metric:\n%s", grepLines(metrics, "overload"))
	}
}

// TestQueueWaitBounded: a queued request gives up after the policy timeout.
func TestQueueWaitBounded(t *testing.T) {
	l, release, started := blocking(t)
	defer close(release)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\nok:\n  module: script://ok\n", loader: l, options: func(o *config.Options) {
		o.Workers, o.QueueSize, o.PolicyTimeout = 1, 10, 300*time.Millisecond
	}})
	go h.post("/validate/block", reviewFor("running", "CREATE", "d", pod(nil)))
	<-started
	t0 := time.Now()
	code, _ := h.post("/validate/ok", reviewFor("waits", "CREATE", "d", pod(nil)))
	if code != 503 || time.Since(t0) < 250*time.Millisecond || time.Since(t0) > 3*time.Second {
		t.Fatalf("HTTP %d after %v, want 503 after ~300ms", code, time.Since(t0))
	}
}

// TestGracefulShutdown: Shutdown waits for the in-flight request, which
// succeeds; new connections are refused; goroutines do not leak.
func TestGracefulShutdown(t *testing.T) {
	before := goroutinesSettle(0)
	l, release, started := blocking(t)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\n", loader: l})
	result := make(chan int)
	go func() {
		code, _ := h.post("/validate/block", reviewFor("inflight", "CREATE", "d", pod(nil)))
		result <- code
	}()
	<-started
	shutdownDone := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdownDone <- h.srv.Shutdown(ctx)
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-shutdownDone:
		t.Fatalf("Shutdown returned (%v) before the in-flight request finished", err)
	default:
	}
	if h.srv.ready.Load() {
		t.Error("still ready while draining")
	}
	close(release)
	if code := <-result; code != 200 {
		t.Fatalf("in-flight request: HTTP %d", code)
	}
	if err := <-shutdownDone; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if l.evals[0].(*scripted).closed.Load() != true {
		t.Error("policy not closed at shutdown")
	}
	if _, err := h.client.Post(h.base+"/validate/block", "application/json", strings.NewReader("{}")); err == nil {
		t.Error("server still accepts requests after Shutdown")
	}
	h.client.CloseIdleConnections()
	if after := goroutinesSettle(before + 2); after > before+2 {
		t.Errorf("goroutines: %d before, %d after shutdown", before, after)
	}
}

// FuzzDecodeInput: the request decoding of every endpoint never panics and
// either fails with an error or yields a request with a uid (AdmissionReview).
func FuzzDecodeInput(f *testing.F) {
	f.Add([]byte(reviewFor("u", "CREATE", "ns", pod(nil))), uint8(0))
	f.Add([]byte(`{"request":{"uid":"x","operation":"DELETE","kind":{"kind":"Pod"}}}`), uint8(1))
	f.Add([]byte(`{"request": [1, {"a": null}]}`), uint8(2))
	f.Add([]byte(`{"request": "x"`), uint8(2))
	f.Fuzz(func(t *testing.T, body []byte, k uint8) {
		kind := endpointKind(k % 3)
		in, err := decodeInput(kind, body)
		if err != nil {
			return
		}
		if kind != kindRaw && (in.req == nil || in.uid == "" || in.operation == "") {
			t.Fatalf("accepted a review without uid/operation: %q", body)
		}
		if kind == kindRaw && len(in.raw) == 0 {
			t.Fatalf("accepted a raw request without request: %q", body)
		}
	})
}

// TestDrain: after Drain the server is unready yet answers every request, and closes each
// connection gracefully after its answer: "Connection: close" over HTTP/1.1, a GOAWAY over HTTP/2
// (net/http turns the header into one). A client's keep-alive connections so leave after a
// complete answer, and Shutdown finds none idle to close under a request being written.
func TestDrain(t *testing.T) {
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: semanticsLoader(t)})
	h1 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: h.ca}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	// send posts a review and reports whether it went over a connection used before.
	send := func(c *http.Client) (*http.Response, bool) {
		t.Helper()
		var reused bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/validate/labels", bytes.NewReader(reviewFor("d1", "CREATE", "default", pod(nil))))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
		return resp, reused
	}
	for _, c := range []*http.Client{h1, h.client} {
		send(c)
		if resp, reused := send(c); resp.Close || !reused {
			t.Fatalf("%s before Drain: Connection: close %v, connection reused %v; want a kept-alive connection", resp.Proto, resp.Close, reused)
		}
	}
	h.srv.Drain()
	if code, _ := h.get("/readiness"); code != http.StatusServiceUnavailable {
		t.Fatalf("readiness %d while draining, want 503", code)
	}
	for range 3 {
		if resp, _ := send(h1); !resp.Close {
			t.Fatal("HTTP/1.1 while draining: the response does not close its connection")
		}
		resp, _ := send(h.client)
		if resp.ProtoMajor != 2 {
			t.Fatalf("the test client speaks %s, want HTTP/2", resp.Proto)
		}
		time.Sleep(100 * time.Millisecond) // the GOAWAY reaches the client
		if _, reused := send(h.client); reused {
			t.Fatal("HTTP/2 while draining: the next request reused the connection the server answered on")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
