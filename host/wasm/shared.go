package wasm

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// CompilationCache is the engine's wazero compilation cache (on disk unless
// disabled), for packages that compile modules of other kinds (host/wasi)
// on their own runtimes. It stays valid until Engine.Close.
func (e *Engine) CompilationCache() wazero.CompilationCache { return e.cache }

// WithMemoryCap makes the instances created with the returned context refuse
// to grow their linear memory past limit bytes, as this package's pools do;
// refused reports whether a grow was refused.
func WithMemoryCap(ctx context.Context, limit uint64) (_ context.Context, refused func() bool) {
	a := &cappedAllocator{limit: limit}
	return experimental.WithMemoryAllocator(ctx, a), a.hit.Load
}
