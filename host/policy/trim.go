package policy

import (
	"runtime/debug"
	"sync"
	"time"
)

// trimDelay is how long the host waits after the last load of a batch
// before it gives the memory freed by the loads back to the OS: loads that
// start meanwhile (a server loads its policies in parallel, a few at a time)
// join the batch.
const trimDelay = 100 * time.Millisecond

// trimmer returns the Go heap that loading left free to the OS once no load
// runs (RATIONALE.md "Why does the host return freed memory after loading?").
// A load copies and decodes modules (the MutatingAdmissionPolicy built-in is
// 66 MB, copied out of the binary), and the Go runtime keeps freed heap for
// reuse, returning it only slowly: after serve's start with 50 policies, 89 MB
// of the 154 MB heap was free and still resident.
type trimmer struct {
	mu      sync.Mutex
	loading int
	timer   *time.Timer
	trims   int // for tests
	free    func()
}

func newTrimmer() *trimmer { return &trimmer{free: debug.FreeOSMemory} }

func (t *trimmer) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loading++
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *trimmer) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loading--
	if t.loading > 0 {
		return
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(trimDelay, t.trim)
		return
	}
	t.timer.Reset(trimDelay)
}

func (t *trimmer) trim() {
	t.mu.Lock()
	if t.loading > 0 {
		t.mu.Unlock()
		return
	}
	t.trims++
	t.mu.Unlock()
	t.free()
}

// Trims is how many times the host returned freed memory after loads.
func (h *Host) Trims() int {
	h.trim.mu.Lock()
	defer h.trim.mu.Unlock()
	return h.trim.trims
}
