package wasm

import (
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// cappedAllocator backs one instance's linear memory and refuses to grow it
// past limit, remembering that it did so: a trap that follows a refused grow is
// reported as ErrMemoryLimit rather than a plain trap.
//
// With mapped set (the pools' instances, where the platform has mmap), the
// memory is a reservation outside the Go heap (mappedMemory); otherwise a Go
// slice grown by copying (cappedMemory).
type cappedAllocator struct {
	limit  uint64
	hit    atomic.Bool
	mapped bool
	// mem is the mapped memory allocated, nil until then and for slices.
	mem *mappedMemory
}

func (a *cappedAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	if a.mapped && mmapSupported {
		// The instantiation that allocates the memory uses it until
		// Pool.newInstance says it is done (users starts at 1).
		m := &mappedMemory{a: a, max: max, users: 1}
		a.mem = m
		return m
	}
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

// mappedMemory is a linear memory reserved with mmap up to the cap
// (address space, not memory: MAP_NORESERVE), outside the Go heap. A grow is
// a reslice: no copy, no garbage, no part of the collector's heap goal; the
// kernel supplies zeroed pages as the guest touches them, and unmapping gives
// them all back at once when the instance is closed (RATIONALE.md "Why is a
// pool instance's memory mapped outside the Go heap?").
//
// Unmapping while a call still runs on the memory would crash the process
// (a slice of a Go array would merely stay alive), and wazero frees a
// module's memory when its runtime is closed, whatever runs: so Free only
// unmaps when no user is left, and the last user's leave unmaps otherwise.
// The users are the instantiation and each call (Pool.Call).
type mappedMemory struct {
	a   *cappedAllocator
	max uint64 // the module's declared maximum, in bytes

	mu    sync.Mutex
	buf   []byte // the whole reservation; nil before the first Reallocate and once unmapped
	users int
	freed bool
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if m.buf == nil {
		if m.freed {
			return nil
		}
		// The initial allocation is always honoured, as for cappedMemory.
		b, err := mapMemory(max(min(m.a.limit, m.max), size))
		if err != nil {
			return nil
		}
		m.buf = b
		return m.buf[:size:size]
	}
	if size > m.a.limit || size > uint64(len(m.buf)) {
		m.a.hit.Store(true)
		return nil
	}
	return m.buf[:size:size]
}

func (m *mappedMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.freed = true
	if m.users == 0 {
		m.unmap()
	}
}

// enter and leave bracket a use of the memory that a Free must not cut.
func (m *mappedMemory) enter() {
	m.mu.Lock()
	m.users++
	m.mu.Unlock()
}

func (m *mappedMemory) leave() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users--
	if m.users == 0 && m.freed {
		m.unmap()
	}
}

func (m *mappedMemory) unmap() {
	if m.buf != nil {
		unmapMemory(m.buf)
		m.buf = nil
	}
}
