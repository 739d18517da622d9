//go:build linux || darwin || freebsd

package wasi

import (
	"context"
	"sync/atomic"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// withMemoryCap gives each instance created with the returned context a
// linear memory reserved up front with mmap, as large as the cap: growing it
// is a reslice, with neither a copy of the memory nor Go heap garbage (the
// Go runtime of a standard-Go guest grows its memory a few times while it
// starts; with slices that cost 0.8 ms per evaluation). The kernel supplies
// zeroed pages as the guest touches them. refused reports whether a grow
// past the cap was refused.
func withMemoryCap(ctx context.Context, limit uint64) (context.Context, func() bool) {
	a := &mmapAllocator{limit: limit}
	return experimental.WithMemoryAllocator(ctx, a), a.hit.Load
}

type mmapAllocator struct {
	limit uint64
	hit   atomic.Bool
}

func (a *mmapAllocator) Allocate(_, _ uint64) experimental.LinearMemory {
	return &mmapMemory{a: a}
}

type mmapMemory struct {
	a   *mmapAllocator
	buf []byte // the whole reservation
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if m.buf == nil {
		// The initial allocation is always honoured (a module whose minimum
		// exceeds the cap fails on its first grow, as with host/wasm's pools).
		reserve := max(m.a.limit, size)
		page := uint64(syscall.Getpagesize())
		reserve = (reserve + page - 1) / page * page
		if reserve == 0 {
			reserve = page
		}
		b, err := syscall.Mmap(-1, 0, int(reserve), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
		if err != nil {
			return nil
		}
		m.buf = b
		return m.buf[:size]
	}
	if size > uint64(len(m.buf)) || size > m.a.limit {
		m.a.hit.Store(true)
		return nil
	}
	return m.buf[:size]
}

func (m *mmapMemory) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
	}
}
