package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/config"
)

// TestRequestBytesInFlightBounded: 24 concurrent requests with 3 MB bodies to
// a policy that holds every evaluation, with workers and queue enough for
// all of them: only as many bodies as --max-request-bytes-in-flight holds
// (4 x 3 MiB by default: 4 of them) are read and evaluated at once, the
// others wait without being read, and the heap grows by about those 4 bodies
// instead of 24 bodies and their decoded forms (before, with 40 clients, all
// 40 were read and decoded at once and the heap grew by 227 MB; with 24, 135
// MB). Once the evaluations end, every request is answered.
func TestRequestBytesInFlightBounded(t *testing.T) {
	l, release, started := blocking(t)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\n", loader: l, options: func(o *config.Options) {
		o.Workers, o.QueueSize, o.PolicyWorkers, o.PolicyTimeout = 64, 64, 64, time.Minute
		o.ReadTimeout = 3 * time.Minute // the last bodies wait for 5 rounds of 4 to be read: slow on a loaded machine or with -race
		// and their answers come that late: past the default 30 s, an HTTP/2 stream is reset (INTERNAL_ERROR)
		o.WriteTimeout = 3 * time.Minute
	}})
	body := reviewFor("big", "CREATE", "default", pod(map[string]string{"big": strings.Repeat("x", 3_000_000)}))
	if int64(len(body)) > h.srv.opts.MaxRequestBytes || len(body) < 3_000_000 {
		t.Fatalf("body of %d bytes", len(body))
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	const clients = 24
	h.client.Timeout = 3 * time.Minute // 6 rounds of 4 bodies: slow with -race
	codes := make(chan int, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := h.post("/validate/block", body)
			codes <- code
		}()
	}
	// the first 4 start; give the others time to (wrongly) get through
	for range 4 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the first requests never reached the policy")
		}
	}
	time.Sleep(2 * time.Second)
	var during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&during)
	inEval := 4 + len(started)
	_, metrics := h.get("/metrics")
	close(release)
	wg.Wait()
	close(codes)

	budget := 4 * h.srv.opts.MaxRequestBytes
	if inEval > 4 {
		t.Errorf("%d requests with 3 MB bodies were evaluated at once with a budget of %d bytes, want 4", inEval, budget)
	}
	if grew := int64(during.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("the heap grew by %d MB with %d requests of 3 MB held, want < 64 MB", grew>>20, clients)
	}
	if peak := h.srv.bodies.peak.Load(); peak > budget || peak < 4*int64(len(body)) {
		t.Errorf("peak body bytes in flight %d, want 4 bodies (%d) <= peak <= %d", peak, 4*len(body), budget)
	}
	if want := "tollgate_server_request_bytes_in_flight " + strconv.FormatFloat(float64(4*len(body)), 'g', -1, 64); !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %q:\n%s", want, grepLines(metrics, "bytes_in_flight"))
	}
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a request got HTTP %d, want every request answered once the evaluations ended", c)
		}
	}
}

// TestBodyBudgetGaugesFollowTheCounts: with requests taking and giving back
// their shares (and parking HTTP/2 bytes) at once, every value the gauges
// are set to is the count at that moment. Before, each request set the gauge
// to the value it had computed, and two such sets landing out of order left
// tollgate_server_request_bytes_in_flight at 9 MB with 12 MB taken
// (TestRequestBytesInFlightBounded failed so on a loaded machine).
func TestBodyBudgetGaugesFollowTheCounts(t *testing.T) {
	var b *bodyBudget
	var stale atomic.Int64
	b = newBodyBudget(1<<20, 1<<10,
		func(v float64) {
			if int64(v) != b.used.Load() {
				stale.Add(1)
			}
		},
		func(v float64) {
			if int64(v) != b.parked.Load() {
				stale.Add(1)
			}
		})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				s, err := b.acquire(t.Context(), int64(1+(g*i)%1000), time.Minute, false)
				if err != nil {
					t.Error(err)
					return
				}
				s.fit(1)
				s.done()
				if _, ok := b.park(64); ok {
					b.unpark(64)
				}
			}
		}()
	}
	wg.Wait()
	if n := stale.Load(); n > 0 {
		t.Errorf("a gauge was set %d times to a value that was not the count at that moment", n)
	}
	if b.used.Load() != 0 || b.parked.Load() != 0 {
		t.Errorf("used %d, parked %d after every share was given back", b.used.Load(), b.parked.Load())
	}
}

// TestRequestBytesWaitExpires: a request that cannot get its body's share of
// --max-request-bytes-in-flight within --policy-timeout, or half the read
// timeout when that is shorter, gets 503 and Retry-After.
func TestRequestBytesWaitExpires(t *testing.T) {
	l, release, started := blocking(t)
	defer close(release)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\n", loader: l, options: func(o *config.Options) {
		o.Workers, o.PolicyTimeout, o.ReadTimeout = 8, 10*time.Second, 2*time.Second // a 1 s wait
		o.MaxRequestBytes, o.MaxRequestBytesInFlight = 1<<20, 1<<20
	}})
	body := reviewFor("big", "CREATE", "default", pod(map[string]string{"big": strings.Repeat("x", 600_000)}))
	go h.post("/validate/block", body)
	<-started
	// over HTTP/2 and HTTP/1.1, to a client still writing its body (the server
	// reads the rest of the body before answering: closing the connection on it
	// would reset it, and a client whose write meets the reset can lose the 503;
	// loadgen fairness saw 16 of 400 such failures without the read, this test
	// does not reproduce that timing)
	h1 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: h.ca}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	for _, c := range []*http.Client{h.client, h1, h1} {
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, h.base+"/validate/block", &slowReader{r: strings.NewReader(string(body))})
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || time.Since(t0) > 5*time.Second {
			t.Fatalf("%s: HTTP %d Retry-After %q after %v, want 503 with Retry-After after ~1 s", resp.Proto, resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(t0))
		}
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_server_limit{limit="request_bytes_in_flight"} 1.048576e+06`) {
		t.Errorf("limit metric:\n%s", grepLines(metrics, "tollgate_server_limit"))
	}
}

// slowReader sends the start of a body at once and the rest after 700 ms,
// when the server has answered: a client still writing its body.
type slowReader struct {
	r     *strings.Reader
	begun bool
}

func (s *slowReader) Read(p []byte) (int, error) {
	if !s.begun {
		s.begun = true
		return s.r.Read(p[:min(len(p), 1024)])
	}
	if s.r.Len() > 0 && s.r.Size()-int64(s.r.Len()) <= 1024 {
		time.Sleep(700 * time.Millisecond)
	}
	return s.r.Read(p)
}

// TestRequestBytesUnannouncedLength: a body sent without a Content-Length
// is charged the largest accepted size while it is read, then only its real
// size: a small chunked request held by its policy leaves the rest of the
// budget to the next request (before, it kept the whole budget and the next
// request got 503).
func TestRequestBytesUnannouncedLength(t *testing.T) {
	l, release, started := blocking(t)
	defer close(release)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\n", loader: l, options: func(o *config.Options) {
		o.Workers, o.PolicyWorkers, o.PolicyTimeout = 8, 8, 500*time.Millisecond
		o.MaxRequestBytes, o.MaxRequestBytesInFlight = 1<<20, 1<<20
	}})
	small := reviewFor("chunked", "CREATE", "default", pod(nil))
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/validate/block", io.MultiReader(strings.NewReader(string(small))))
		req.ContentLength = -1 // sent without a length
		req.Header.Set("Content-Type", "application/json")
		if resp, err := h.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	big := reviewFor("big", "CREATE", "default", pod(map[string]string{"big": strings.Repeat("x", 600_000)}))
	go h.post("/validate/block", big)
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("a 600 kB request beside a held chunked one of 1 kB never reached the policy: the chunked one kept the whole budget")
	}
	want := len(small) + len(big)
	if got := h.srv.bodies.used.Load(); got != int64(want) {
		t.Errorf("body bytes in flight %d, want %d", got, want)
	}
}

// TestHTTP2ParkedBytesBounded: a client that opens 16 HTTP/2 connections of
// 64 streams each, sends 64 KiB (a stream's window) of each body and
// withholds the rest, while the body budget (1 MiB) is taken, cannot park
// 16 x 64 x 64 KiB = 64 MiB in the server: a stream that would wait for the
// budget first takes what it sent ahead from an allowance of the budget's
// size, and beyond it is answered 503 at once and reset, dropping its bytes.
// The client is Go's HTTP/2 transport in a child process (so that its own
// buffers are not in the heap measured). Before, every stream waited with
// its 64 KiB parked and the heap grew by 64 MiB.
func TestHTTP2ParkedBytesBounded(t *testing.T) {
	if url := os.Getenv("TOLLGATE_TEST_H2_CLIENT"); url != "" {
		h2Withholder(url, os.Getenv("TOLLGATE_TEST_H2_CA"))
		return
	}
	l, release, started := blocking(t)
	h := start(t, harnessOpts{policies: "block:\n  module: script://block\n", loader: l, options: func(o *config.Options) {
		// A stream that gets its place waits for its share until the test ends: the wait
		// (min(policy timeout, read timeout / 2)) is far longer than the 1024 streams take
		// to open on a loaded machine, so a 503 within h2QuickAnswer is a refusal at once.
		o.Workers, o.PolicyTimeout, o.ReadTimeout, o.WriteTimeout = 2, 10*time.Minute, 20*time.Minute, 20*time.Minute
		o.MaxRequestBytes, o.MaxRequestBytesInFlight = 1<<20, 1<<20
	}})
	// one request takes the whole budget and holds it in its evaluation
	held := make(chan int, 1)
	h.client.Timeout = 15 * time.Minute
	go func() {
		resp, err := h.client.Post(h.base+"/validate/block", "application/json",
			strings.NewReader(string(reviewFor("held", "CREATE", "default", pod(map[string]string{"big": strings.Repeat("x", 900_000)})))))
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	<-started
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	ca := h.certs.CAFile
	child := exec.Command(os.Args[0], "-test.run=^TestHTTP2ParkedBytesBounded$", "-test.v")
	child.Env = append(os.Environ(), "TOLLGATE_TEST_H2_CLIENT="+h.base+"/validate/block", "TOLLGATE_TEST_H2_CA="+ca)
	var out strings.Builder
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	// the streams open and send their 64 KiB: let them all arrive (the client says when)
	var during runtime.MemStats
	var metrics string
	for deadline := time.Now().Add(h2Settle + time.Minute); ; {
		time.Sleep(time.Second)
		runtime.GC()
		runtime.ReadMemStats(&during)
		_, metrics = h.get("/metrics")
		if strings.Contains(out.String(), "streams: ") || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(2 * time.Second)
	runtime.GC()
	runtime.ReadMemStats(&during)
	_, metrics = h.get("/metrics")
	grew := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	child.Process.Signal(os.Interrupt)
	child.Wait()
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the request holding the budget: HTTP %d", code)
	}
	t.Logf("heap +%d MiB; client:\n%s", grew>>20, out.String())
	m := regexp.MustCompile(`streams: (\d+) sent 64 KiB, (\d+) unanswered; (\d+) answered \(503 at once: (\d+)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the client did not report:\n%s", out.String())
	}
	waited, _ := strconv.Atoi(m[2])
	quick, _ := strconv.Atoi(m[4])
	if grew > 16<<20 {
		t.Errorf("the heap grew by %d MiB with 1024 HTTP/2 streams withholding their bodies, want < 16 MiB (the parked allowance is 1 MiB)", grew>>20)
	}
	if got := seriesValue(t, metrics, "tollgate_server_http2_bytes_parked"); got > 1<<20 || got < 64<<10 {
		t.Errorf("tollgate_server_http2_bytes_parked %v while the streams wait, want 64 KiB to 1 MiB", got)
	}
	if sent, _ := strconv.Atoi(m[1]); sent != 1024 || waited > 16 || quick < 1024-16 {
		t.Errorf("%d streams sent 64 KiB, %d waited unanswered, %d were answered 503 at once; want 16 (the allowance) waiting and the rest refused", sent, waited, quick)
	}
}

// h2Withholder is TestHTTP2ParkedBytesBounded's client: 1024 concurrent
// requests over HTTP/2 (16 connections of 64 streams, the server's limit),
// each sending 64 KiB of its body and withholding the
// rest until interrupted; it prints how many got 503 within h2QuickAnswer.
func h2Withholder(url, caFile string) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// a client (one connection) per 64 streams, each connected first, so that it
	// knows the server's stream limit before it opens them
	var clients []*http.Client
	for range 16 {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
		resp, err := c.Get(url)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			panic("not HTTP/2: " + resp.Proto)
		}
		clients = append(clients, c)
	}
	stop := make(chan struct{})
	var sent, quick, answered, failed atomic.Int64
	waiting := make([]atomic.Bool, 1024) // sent its 64 KiB, unanswered
	for i := range 1024 {
		go func() {
			body := &withheld{ahead: 64 << 10, stop: stop, closed: make(chan struct{}), sent: func() { waiting[i].Store(true); sent.Add(1) }}
			req, _ := http.NewRequest(http.MethodPost, url, body)
			t0 := time.Now()
			resp, err := clients[i/64].Do(req)
			waiting[i].Store(false)
			if err != nil {
				if failed.Add(1) == 1 {
					fmt.Println("first failure:", err)
				}
				return
			}
			resp.Body.Close()
			answered.Add(1)
			if resp.StatusCode == http.StatusServiceUnavailable && time.Since(t0) < h2QuickAnswer {
				quick.Add(1)
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	pending := func() int {
		n := 0
		for i := range waiting {
			if waiting[i].Load() {
				n++
			}
		}
		return n
	}
	// every stream has either sent its 64 KiB and waits, or has its answer
	for deadline := time.Now().Add(h2Settle); int64(pending())+answered.Load()+failed.Load() < 1024 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		fmt.Printf("progress: %d sent, %d wait, %d answered, %d failed\n", sent.Load(), pending(), answered.Load(), failed.Load())
	}
	time.Sleep(500 * time.Millisecond)
	fmt.Printf("streams: %d sent 64 KiB, %d unanswered; %d answered (503 at once: %d), %d failed\n", sent.Load(), 1024-answered.Load()-failed.Load(), answered.Load(), quick.Load(), failed.Load())
	<-sig
	close(stop)
}

// h2Settle bounds the wait for TestHTTP2ParkedBytesBounded's 1024 streams to
// open and send or be answered (seconds on a quiet machine); h2QuickAnswer is
// what counts as a refusal at once: far below the server's wait for a share
// (10 minutes in the test), far above what a loaded machine takes to answer.
const (
	h2Settle      = 4 * time.Minute
	h2QuickAnswer = 2 * time.Minute
)

// withheld is a request body that yields ahead bytes, calls sent, then
// blocks until stop or Close (the transport closes it once answered).
type withheld struct {
	ahead     int
	stop      chan struct{}
	sent      func()
	once      sync.Once
	closed    chan struct{}
	closeOnce sync.Once
}

func (w *withheld) Read(p []byte) (int, error) {
	if w.ahead > 0 {
		n := min(len(p), w.ahead)
		for i := range p[:n] {
			p[i] = 'x'
		}
		w.ahead -= n
		if w.ahead == 0 {
			w.once.Do(w.sent)
		}
		return n, nil
	}
	select {
	case <-w.stop:
	case <-w.closed:
	}
	return 0, io.EOF
}

func (w *withheld) Close() error {
	w.closeOnce.Do(func() { close(w.closed) })
	return nil
}
