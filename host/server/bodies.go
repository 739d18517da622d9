package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// bodyBudget bounds the bytes of request bodies in flight: a request takes
// its body's size (its Content-Length; the largest accepted body when the
// length is not announced or is larger) before the body is read, and gives it
// back with its answer, after its evaluation, since the body and its decoded
// form live that long. A request that cannot take its share within the wait
// is answered 503: memory stays bounded whatever the number of clients, and
// the excess waits or is refused instead of growing the heap.
//
// An HTTP/2 request may have sent up to a stream window (h2StreamWindow) of
// its body before its handler runs: those bytes sit in the server's memory
// while it waits for its share. So such a request first takes what it may
// have sent ahead from a second allowance, of the budget's size, without
// waiting, and gives it back once it has its share (or is refused): when
// that allowance is out, it is refused at once, and its stream (with what it
// sent) is dropped. What clients park is bounded by that allowance, not by
// --max-connections x streams x window.
type bodyBudget struct {
	sem    *semaphore.Weighted
	total  int64
	max    int64 // the largest body accepted: what an unannounced length costs
	used   atomic.Int64
	peak   atomic.Int64 // the largest used seen (tests)
	gauge  func(float64)
	gmu    sync.Mutex   // orders the changes of used and parked with their gauges' (see add)
	parked atomic.Int64 // sent ahead by HTTP/2 requests waiting for their share (at most total)
	pgauge func(float64)
}

// defaultBodyBudget is four of the largest bodies accepted.
func defaultBodyBudget(maxRequestBytes int64) int64 { return 4 * maxRequestBytes }

func newBodyBudget(total, maxRequestBytes int64, gauge, parkedGauge func(float64)) *bodyBudget {
	if total <= 0 {
		total = defaultBodyBudget(maxRequestBytes)
	}
	total = max(total, maxRequestBytes) // the largest body must fit
	return &bodyBudget{sem: semaphore.NewWeighted(total), total: total, max: maxRequestBytes, gauge: gauge, pgauge: parkedGauge}
}

var errBodyBudget = errors.New("too many request bytes in flight")

// acquire takes the share of a body of contentLength bytes (-1: unknown),
// waiting at most wait. An HTTP/2 request (h2) that has to wait first takes
// what it may have sent ahead from the parked allowance, or is refused.
func (b *bodyBudget) acquire(ctx context.Context, contentLength int64, wait time.Duration, h2 bool) (*bodyShare, error) {
	n := contentLength
	if n < 0 || n > b.max {
		n = b.max
	}
	n = max(n, 1)
	if !b.sem.TryAcquire(n) {
		if h2 {
			ahead := min(n, h2StreamWindow)
			if p, ok := b.park(ahead); !ok {
				return nil, fmt.Errorf("%w (%d of %d bytes taken, and HTTP/2 requests waiting for them have %d bytes sent ahead)", errBodyBudget, b.used.Load(), b.total, p)
			}
			defer b.unpark(ahead)
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		err := b.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w (%d of %d bytes taken, waited %s for %d more)", errBodyBudget, b.used.Load(), b.total, wait, n)
		}
	}
	used := b.add(n)
	for p := b.peak.Load(); used > p && !b.peak.CompareAndSwap(p, used); p = b.peak.Load() {
	}
	return &bodyShare{b: b, n: n}, nil
}

// add changes used by n and sets the gauge to the result. The two go together under gmu: two
// requests setting the gauge to the values each computed could otherwise land out of order and
// leave it showing 9 MB while 12 MB are taken, until the next change.
func (b *bodyBudget) add(n int64) int64 {
	b.gmu.Lock()
	defer b.gmu.Unlock()
	used := b.used.Add(n)
	b.gauge(float64(used))
	return used
}

// park takes n from the parked allowance and sets its gauge, or, when the allowance is out, takes
// nothing and reports what is parked.
func (b *bodyBudget) park(n int64) (int64, bool) {
	b.gmu.Lock()
	defer b.gmu.Unlock()
	p := b.parked.Add(n)
	if p > b.total {
		return b.parked.Add(-n), false
	}
	b.pgauge(float64(p))
	return p, true
}

func (b *bodyBudget) unpark(n int64) {
	b.gmu.Lock()
	defer b.gmu.Unlock()
	b.pgauge(float64(b.parked.Add(-n)))
}

// bodyShare is one request's share of the budget.
type bodyShare struct {
	b *bodyBudget
	n int64
}

// fit gives back what the body, read, did not need (a body sent without a
// Content-Length was charged the largest size).
func (s *bodyShare) fit(size int) {
	if excess := s.n - max(int64(size), 1); excess > 0 {
		s.n -= excess
		s.b.add(-excess)
		s.b.sem.Release(excess)
	}
}

// done gives the share back.
func (s *bodyShare) done() {
	s.b.add(-s.n)
	s.b.sem.Release(s.n)
}

// h2Buffers: what an HTTP/2 client may send ahead of the handler reading it
// (the flow-control windows). A request waiting for its share of the body
// budget has not read its body, and with net/http's defaults (1 MiB per
// stream and per connection) each such stream could park a megabyte in the
// server's memory; worse, the data parked by waiting streams holds the
// connection's window, so the streams that got their share and read could
// starve behind them until the waits expire. So a stream may send 64 KiB
// ahead, and the connection's window is that times the concurrent streams
// (64): the waiting streams never block the reading ones. A connection
// could so park 4 MiB, and --max-connections of them a gigabyte: the
// parked allowance of the body budget (bodyBudget.acquire) bounds that.
var h2Buffers = &http.HTTP2Config{
	MaxConcurrentStreams:          h2Streams,
	MaxReceiveBufferPerStream:     h2StreamWindow,
	MaxReceiveBufferPerConnection: h2Streams * h2StreamWindow,
}

const (
	h2Streams      = 64
	h2StreamWindow = 64 << 10
)
