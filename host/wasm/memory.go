package wasm

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// cappedAllocator backs one instance's linear memory and refuses to grow it
// past limit, remembering that it did so: a trap that follows a refused grow is
// reported as ErrMemoryLimit rather than a plain trap.
type cappedAllocator struct {
	limit uint64
	hit   atomic.Bool
}

func (a *cappedAllocator) Allocate(capacity, _ uint64) experimental.LinearMemory {
	return &cappedMemory{a: a, buf: make([]byte, 0, capacity)}
}

type cappedMemory struct {
	a   *cappedAllocator
	buf []byte
}

func (m *cappedMemory) Reallocate(size uint64) []byte {
	// The initial allocation (len 0) is always honoured so that a module whose
	// declared minimum exceeds the cap fails on its first grow, not in wazero.
	if len(m.buf) > 0 && size > m.a.limit {
		m.a.hit.Store(true)
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	newCap := uint64(cap(m.buf)) * 2
	if newCap < size {
		newCap = size
	}
	if newCap > m.a.limit && size <= m.a.limit {
		newCap = m.a.limit
	}
	nb := make([]byte, size, newCap)
	copy(nb, m.buf)
	m.buf = nb
	return m.buf
}

func (m *cappedMemory) Free() { m.buf = nil }
