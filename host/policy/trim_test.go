package policy

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestTrimAfterLoads: freed memory is returned once per batch of loads, when
// the last one is done, not while any runs.
func TestTrimAfterLoads(t *testing.T) {
	var freed atomic.Int32
	tr := &trimmer{free: func() { freed.Add(1) }}
	tr.start()
	tr.start()
	tr.done()
	time.Sleep(3 * trimDelay)
	if n := freed.Load(); n != 0 {
		t.Fatalf("%d trims while a load runs, want 0", n)
	}
	tr.done()
	tr.start() // joins the batch: the trim waits for it
	time.Sleep(trimDelay / 2)
	tr.done()
	time.Sleep(trimDelay / 2)
	if n := freed.Load(); n != 0 {
		t.Fatalf("%d trims before the delay after the last load, want 0", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for freed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * trimDelay)
	if n := freed.Load(); n != 1 {
		t.Fatalf("%d trims after a batch of three loads, want 1", n)
	}
}
