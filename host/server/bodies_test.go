package server

import (
	"crypto/tls"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
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
	case <-time.After(5 * time.Second):
		t.Fatal("a 600 kB request beside a held chunked one of 1 kB never reached the policy: the chunked one kept the whole budget")
	}
	want := len(small) + len(big)
	if got := h.srv.bodies.used.Load(); got != int64(want) {
		t.Errorf("body bytes in flight %d, want %d", got, want)
	}
}
