package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
)

// TestLimiterShares: one policy runs at most its share of the workers and
// holds at most its share of the queue; a freed worker goes to the waiting
// policies in turn, so a request to a quiet policy is not served after the
// queue of a busy one.
func TestLimiterShares(t *testing.T) {
	var mu sync.Mutex
	rejected := map[string]int{}
	l := newLimiter(3, 6, 2, 3, limiterHooks{rejected: func(id, reason string) {
		mu.Lock()
		rejected[id+"/"+reason]++
		mu.Unlock()
	}})
	ctx := context.Background()
	for range 2 {
		if err := l.acquire(ctx, "busy", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// busy has its 2 workers: its third request waits although a worker is free
	got := make(chan string, 10)
	wait := func(id string) {
		before := l.queued()
		go func() {
			if err := l.acquire(ctx, id, 10*time.Second); err != nil {
				got <- id + ": " + err.Error()
				return
			}
			got <- id
		}()
		for deadline := time.Now().Add(5 * time.Second); l.queued() == before && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	for range 3 {
		wait("busy")
	}
	if n := l.queued(); n != 3 {
		t.Fatalf("queued %d, want busy's 3 while a worker is free but not busy's to take", n)
	}
	// busy's share of the queue (3) is full: its next request is refused at once...
	if err := l.acquire(ctx, "busy", 10*time.Second); !errors.Is(err, errOverloaded) || !strings.Contains(err.Error(), "policy's share") {
		t.Fatalf("busy's 6th request: %v, want its share of the queue full", err)
	}
	// ...while another policy takes the free worker at once,
	if err := l.acquire(ctx, "quiet", time.Second); err != nil {
		t.Fatal(err)
	}
	// and, all workers busy, queues behind busy's 3 but is served first.
	wait("quiet")
	l.release("busy")
	if first := <-got; first != "quiet" {
		t.Fatalf("the freed worker went to %q, want the quiet policy's request (busy's came first but busy had its share)", first)
	}
	l.release("quiet")
	if next := <-got; next != "busy" {
		t.Fatalf("then %q, want busy", next)
	}
	mu.Lock()
	defer mu.Unlock()
	if rejected["busy/policy_queue_full"] != 1 || len(rejected) != 1 {
		t.Fatalf("rejections %v", rejected)
	}
}

// TestLoopingPolicyDoesNotStarveOthers: while 40 concurrent requests go to a
// real policy that loops until its deadline (2 s), a healthy policy keeps
// answering within its normal latency: the looping policy runs on at most
// its share of the workers (1 of 2) and its queue is served in turn with the
// healthy policy's requests. Before, the looping policy held both workers
// and the healthy policy's requests waited behind its queue, to get 503
// after 2 s. The metrics show the looping policy's queue and rejections.
func TestLoopingPolicyDoesNotStarveOthers(t *testing.T) {
	bad := wasmPath(t, "test/testdata/policies/misbehave")
	pols := fmt.Sprintf("good:\n  module: %[1]s\nloop:\n  module: %[1]s\n  settings: {behaviour: loop}\n", bad)
	h := start(t, harnessOpts{policies: pols, loader: newTestLoader(t), options: func(o *config.Options) {
		o.Workers, o.QueueSize, o.PolicyTimeout = 2, 40, 2*time.Second
	}})
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(stop); j++ {
				h.post("/validate/loop", reviewFor(fmt.Sprintf("loop-%d-%d", i, j), "CREATE", "default", pod(nil)))
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the loop takes its workers and fills its queue
	var slowest time.Duration
	n := 0
	for ; time.Now().Before(stop); n++ {
		t0 := time.Now()
		code, r := h.review("/validate/good", reviewFor(fmt.Sprintf("good-%d", n), "CREATE", "default", pod(nil)))
		slowest = max(slowest, time.Since(t0))
		if code != 200 || !r.Allowed {
			t.Fatalf("good request %d during the loop's burst: HTTP %d %+v after %v", n, code, r, time.Since(t0))
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if slowest > 500*time.Millisecond {
		t.Errorf("the slowest of %d good requests took %v during the loop's burst", n, slowest)
	}
	_, metrics := h.get("/metrics")
	for _, want := range []string{
		`tollgate_server_limit{limit="policy_workers"} 1`,
		`tollgate_server_limit{limit="policy_queue"} 20`,
		`tollgate_policy_overload_rejections_total{policy="loop",reason="policy_queue_full"}`,
		`tollgate_policy_requests_queued{policy="loop"}`,
		`tollgate_policy_evaluations_running{policy="good"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "tollgate_"))
		}
	}
	if strings.Contains(metrics, `tollgate_policy_overload_rejections_total{policy="good"`) {
		t.Errorf("the good policy had requests refused:\n%s", grepLines(metrics, "tollgate_policy_overload"))
	}
}

// TestMaxConnections: with --max-connections 2, a third connection is not
// served (its TLS handshake does not complete) until one of the two closes.
func TestMaxConnections(t *testing.T) {
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: semanticsLoader(t), options: func(o *config.Options) {
		o.MaxConnections = 2
	}})
	dial := func(timeout time.Duration) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: timeout}
		c, err := tls.DialWithDialer(d, "tcp", h.srv.Addr(), &tls.Config{RootCAs: h.ca})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	var open []*tls.Conn
	for i := range 2 {
		c, err := dial(5 * time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	// the kernel accepts the TCP connection into the backlog; the server does not take it
	raw, err := net.Dial("tcp", h.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	third := tls.Client(raw, &tls.Config{RootCAs: h.ca, ServerName: "127.0.0.1"})
	raw.SetDeadline(time.Now().Add(time.Second))
	if err := third.Handshake(); err == nil {
		t.Fatal("a third connection was served with --max-connections 2")
	}
	raw.Close() // else the server takes it from the backlog first when a slot frees
	open[0].Close()
	if c, err := dial(5 * time.Second); err != nil {
		t.Fatalf("after one of the two closed, a new connection: %v", err)
	} else {
		c.Close()
	}
	open[1].Close()
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_server_limit{limit="connections"} 2`) {
		t.Errorf("metrics:\n%s", grepLines(metrics, "tollgate_server_limit"))
	}
}

// TestLimiterLaneKept: a request that finds a worker free allocates nothing in the limiter (its
// policy's lane outlives the request), and prune drops the idle lanes of policies no longer
// served, keeping those still served.
func TestLimiterLaneKept(t *testing.T) {
	l := newLimiter(4, 8, 0, 0, limiterHooks{})
	ctx := context.Background()
	for _, id := range []string{"kept", "removed"} {
		if err := l.acquire(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		l.release(id)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := l.acquire(ctx, "kept", time.Second); err != nil {
			t.Fatal(err)
		}
		l.release("kept")
	}); allocs != 0 {
		t.Errorf("acquire and release with a worker free: %v allocations, want 0", allocs)
	}
	l.prune(func(id string) bool { return id == "kept" })
	if _, ok := l.pols["removed"]; ok {
		t.Error("the lane of a policy no longer served was kept")
	}
	if _, ok := l.pols["kept"]; !ok {
		t.Error("the lane of a served policy was dropped")
	}
}
