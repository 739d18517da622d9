package wapc

import (
	"context"
	"sync"

	"github.com/tollgate-dev/tollgate/host/wasm"
)

// Host is the waPC part of a policy host: its engine, the growth after which
// an instance is recycled, and the instance pools shared by policies. It is
// safe for concurrent use.
type Host struct {
	engine *wasm.Engine
	// recycle is the PoolConfig.RecycleGrowth of every pool.
	recycle uint64

	mu     sync.Mutex
	shared map[sharedKey]*sharedPool
}

// NewHost makes the waPC part of a policy host on engine; recycle is the
// RecycleGrowth of every pool (wasm.PoolConfig).
func NewHost(engine *wasm.Engine, recycle uint64) *Host {
	return &Host{engine: engine, recycle: recycle, shared: map[sharedKey]*sharedPool{}}
}

// sharedKey identifies a pool shared by policies (Load's share): the
// module's digest and memory limit, as for the compiled module, the pool
// size, so that a reload that changes the size (serve's --workers) starts a
// pool of the new size rather than joining the old one, and the share group.
type sharedKey struct {
	digest string
	memCap uint64
	size   int
	group  string
}

// sharedPool is a pool of instances used by every policy that loaded with
// its key and has not been closed yet (refs). It holds no module reference of
// its own: each of its users holds one, and releases it after leaving the
// pool, so the module outlives the pool.
type sharedPool struct {
	host  *Host
	key   sharedKey
	ready chan struct{} // closed when pool and err are set
	pool  *wasm.Pool
	err   error
	refs  int
}

// SharedPools is how many instance pools are shared by policies now.
func (h *Host) SharedPools() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.shared)
}

// acquirePool returns the shared pool of mod for pools of size instances and
// the share group, creating it (with one instance started with ctx) when no
// policy uses one.
// Every successful acquirePool must be matched by a releasePool.
func (h *Host) acquirePool(ctx context.Context, mod *wasm.Module, size int, group string) (*sharedPool, error) {
	key := sharedKey{digest: mod.Digest(), memCap: mod.MemoryLimitBytes(), size: size, group: group}
	h.mu.Lock()
	if sp, ok := h.shared[key]; ok {
		sp.refs++
		h.mu.Unlock()
		<-sp.ready
		if sp.err != nil {
			h.releasePool(ctx, sp)
			return nil, sp.err
		}
		return sp, nil
	}
	sp := &sharedPool{host: h, key: key, ready: make(chan struct{}), refs: 1}
	h.shared[key] = sp
	h.mu.Unlock()

	sp.pool, sp.err = mod.NewPoolConfig(ctx, wasm.PoolConfig{Size: size, RecycleGrowth: h.recycle})
	if sp.err != nil {
		// Later loads start afresh rather than getting this error (it may be
		// this load's deadline); the ones waiting get it.
		h.mu.Lock()
		if h.shared[key] == sp {
			delete(h.shared, key)
		}
		h.mu.Unlock()
	}
	close(sp.ready)
	if sp.err != nil {
		h.releasePool(ctx, sp)
		return nil, sp.err
	}
	return sp, nil
}

// releasePool gives back a reference taken by acquirePool; the last one
// closes the pool (its busy instances when their calls return).
func (h *Host) releasePool(ctx context.Context, sp *sharedPool) {
	h.mu.Lock()
	sp.refs--
	last := sp.refs == 0
	if last && h.shared[sp.key] == sp {
		delete(h.shared, sp.key)
	}
	h.mu.Unlock()
	if last && sp.pool != nil {
		sp.pool.Close(ctx)
	}
}
