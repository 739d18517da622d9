package wasm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// growModule is a waPC guest whose __guest_call grows its memory by as many
// 64 KiB pages as the payload has bytes and writes every byte of them (so
// that they are resident), then answers success without a response.
func growModule() []byte {
	return guestModule([]byte{1, 0x60, 2, 0x7f, 0x7f, 1, 0x7f}, // (i32 i32)->i32
		[]byte{0,
			0x20, 1, 0x40, 0, 0x1a, // memory.grow(payload length); drop
			0x41, 0, 0x41, 1, 0x20, 1, 0x41, 16, 0x74, 0xfc, 0x0b, 0, // memory.fill(0, 1, length << 16)
			0x41, 1, 0x0b}) // i32.const 1; end
}

// growPool is a pool of growModule.
func growPool(t *testing.T, c wasm.PoolConfig) *wasm.Pool {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("linear memory is mapped outside the Go heap on linux only")
	}
	ctx := context.Background()
	m, err := newEngine(t, wasm.Config{}).Compile(ctx, growModule(), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Release)
	p, err := m.NewPoolConfig(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })
	return p
}

// rssBytes is the process's resident set (VmRSS).
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestPoolRecyclesGrownInstance: an instance whose memory a call grew by
// more than RecycleGrowth is closed after that call, and the memory leaves
// the process at once; a call that grows it less keeps it, and so does a
// pool with RecycleGrowth 0.
func TestPoolRecyclesGrownInstance(t *testing.T) {
	ctx := context.Background()
	const page = 64 << 10
	pages := func(n int) []byte { return make([]byte, n) }
	p := growPool(t, wasm.PoolConfig{Size: 1, RecycleGrowth: 8 << 20})
	// The first call of an instance never recycles it, however it grows.
	if _, err := p.Call(ctx, 0, "x", pages(256)); err != nil {
		t.Fatal(err)
	}
	if live, mem := p.Live(), p.MemoryBytes(); live != 1 || mem != 257*page {
		t.Fatalf("after a first call growing 16 MB: %d live, %d bytes; want 1, %d", live, mem, 257*page)
	}
	if _, err := p.Call(ctx, 0, "x", pages(16)); err != nil { // 1 MB: kept
		t.Fatal(err)
	}
	if live, mem := p.Live(), p.MemoryBytes(); live != 1 || mem != 273*page {
		t.Fatalf("after a call growing 1 MB: %d live, %d bytes; want 1, %d", live, mem, 273*page)
	}
	runtime.GC()
	before := rssBytes(t)
	if _, err := p.Call(ctx, 0, "x", pages(1024)); err != nil { // 64 MB, all written
		t.Fatal(err)
	}
	after := rssBytes(t)
	if live, mem := p.Live(), p.MemoryBytes(); live != 0 || mem != 0 {
		t.Fatalf("after a call growing 64 MB: %d live, %d bytes of instance memory; want the instance closed", live, mem)
	}
	if after-before > 16<<20 {
		t.Fatalf("RSS %d MB before the call, %d MB after: the 64 MB the guest wrote stayed", before>>20, after>>20)
	}
	// The next call starts a fresh instance.
	if _, err := p.Call(ctx, 0, "x", nil); err != nil {
		t.Fatal(err)
	}
	if live, mem := p.Live(), p.MemoryBytes(); live != 1 || mem != page {
		t.Fatalf("after a call on a fresh instance: %d live, %d bytes; want 1, %d", live, mem, page)
	}

	keep := growPool(t, wasm.PoolConfig{Size: 1})
	for _, n := range []int{0, 1024} {
		if _, err := keep.Call(ctx, 0, "x", pages(n)); err != nil {
			t.Fatal(err)
		}
	}
	if live, mem := keep.Live(), keep.MemoryBytes(); live != 1 || mem != 1025*page {
		t.Fatalf("RecycleGrowth 0: %d live, %d bytes; want the instance kept at %d", live, mem, 1025*page)
	}
}

// TestPoolMemoryOutsideGoHeap: what a guest's memory grows to is not Go
// heap (no collector headroom is kept for it, and no copy is made to grow it).
func TestPoolMemoryOutsideGoHeap(t *testing.T) {
	ctx := context.Background()
	p := growPool(t, wasm.PoolConfig{Size: 1})
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap := ms.HeapAlloc
	for range 4 { // 4 x 16 MB, each grow of a slice a copy
		if _, err := p.Call(ctx, 0, "x", make([]byte, 256)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&ms)
	if p.MemoryBytes() < 64<<20 {
		t.Fatalf("instance memory %d bytes, want 64 MB and more", p.MemoryBytes())
	}
	if grown := int64(ms.HeapAlloc) - int64(heap); grown > 8<<20 {
		t.Fatalf("Go heap grew by %d MB with the guest's 64 MB", grown>>20)
	}
}

// TestPoolCloseDuringCall: closing the pool and releasing the module (the
// last reference: its runtime closes every instance, the busy one too) while
// a call runs must not unmap the memory under the guest: the call ends, and
// the process does not crash.
func TestPoolCloseDuringCall(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, wasm.Config{})
	m, err := e.Compile(ctx, testfixture.Module(t, "test/testdata/policies/misbehave"), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.NewPool(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// Sleeps 300 ms, then writes its answer into its memory.
		_, err := p.Call(ctx, 5*time.Second, "validate", []byte(`{"request":{},"settings":{"behaviour":"sleep","seconds":0.3}}`))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.Close(ctx)
	m.Release()
	select {
	case err := <-done:
		t.Logf("the call on the closed module ended with %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end")
	}
}

// TestHostCallPayloadOutlivesInstance: a host-call handler that has not
// answered by the deadline may still read its payload after the guest gave
// up and its instance (and memory) is gone: it reads what the guest sent.
func TestHostCallPayloadOutlivesInstance(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, wasm.Config{})
	m, err := e.Compile(ctx, testfixture.Module(t, "test/testdata/policies/misbehave"), wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	p, err := m.NewPool(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var read []byte
	h := func(ctx context.Context, _, _, _ string, payload []byte) ([]byte, error) {
		<-ctx.Done()
		go func() {
			defer wg.Done()
			time.Sleep(200 * time.Millisecond) // the instance is closed by now
			read = bytes.Clone(payload)
		}()
		return nil, ctx.Err()
	}
	payload := `{"request":{},"settings":{"behaviour":"hostcall","operation":"op","payload":"` + strings.Repeat("p", 1000) + `"}}`
	_, err = p.Call(wasm.WithHostCallHandler(ctx, h), 100*time.Millisecond, "validate", []byte(payload))
	if !errors.Is(err, wasm.ErrTimeout) {
		t.Fatalf("want ErrTimeout, got %v", err)
	}
	if p.Live() != 0 {
		t.Fatalf("%d live instances after a deadline, want 0", p.Live())
	}
	wg.Wait()
	if want := `"` + strings.Repeat("p", 1000) + `"`; string(read) != want {
		t.Fatalf("the handler read %.40q..., want the guest's payload", read)
	}
}
