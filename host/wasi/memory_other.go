//go:build !(linux || darwin || freebsd)

package wasi

import (
	"context"

	"github.com/tollgate-dev/tollgate/host/wasm"
)

// withMemoryCap caps linear memory with host/wasm's growable slices.
func withMemoryCap(ctx context.Context, limit uint64) (context.Context, func() bool) {
	return wasm.WithMemoryCap(ctx, limit)
}
