package wapc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/policy/eval"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// Evaluator is a waPC policy's module and instance pool.
type Evaluator struct {
	cfg  eval.Config
	mod  *wasm.Module
	pool *wasm.Pool
	// shared is the pool the policy shares with others, nil when pool is
	// its own; leave gives it back on Close.
	shared *sharedPool
	leave  sync.Once
}

var (
	_ eval.Evaluator      = (*Evaluator)(nil)
	_ eval.MemoryReporter = (*Evaluator)(nil)
	_ eval.Sharer         = (*Evaluator)(nil)
)

// Load compiles the module (or reuses it) and starts its pool of
// cfg.PoolSize instances; with share the pool is the one shared by the
// policies of the same module digest, memory limit, pool size and group.
// Share only a module whose guest keeps nothing between calls but what it
// derives from the settings it receives with each call, keyed by them.
func (h *Host) Load(ctx context.Context, cfg eval.Config, share bool, group string) (*Evaluator, error) {
	mod, err := h.engine.Compile(ctx, cfg.Module, wasm.ModuleConfig{MemoryLimitBytes: cfg.MemoryLimitBytes, Digest: cfg.Digest})
	if err != nil {
		return nil, hintWasi(err, cfg.Module)
	}
	e := &Evaluator{cfg: cfg, mod: mod}
	if share {
		sp, err := h.acquirePool(e.cfg.WithHostCalls(ctx), mod, cfg.PoolSize, group)
		if err != nil {
			mod.Release()
			return nil, err
		}
		e.pool, e.shared = sp.pool, sp
		return e, nil
	}
	// The start of an instance (start function, _initialize) is bounded
	// like an evaluation, but by no less than wasm.DefaultStartTimeout:
	// a standard-Go module's runtime start takes a while on a busy node.
	pool, err := mod.NewPoolConfig(e.cfg.WithHostCalls(ctx), wasm.PoolConfig{Size: cfg.PoolSize, RecycleGrowth: h.recycle, StartTimeout: max(cfg.Timeout, wasm.DefaultStartTimeout)})
	if err != nil {
		mod.Release()
		return nil, err
	}
	e.pool = pool
	return e, nil
}

// ProtocolVersion asks a module for the Kubewarden protocol version it
// speaks (its `protocol_version` operation, which policy SDKs register), on
// an instance of its own bounded by timeout.
func (h *Host) ProtocolVersion(ctx context.Context, module []byte, timeout time.Duration) (string, error) {
	mod, err := h.engine.Compile(ctx, module, wasm.ModuleConfig{})
	if err != nil {
		return "", err
	}
	defer mod.Release()
	pool, err := mod.NewPool(ctx, 1)
	if err != nil {
		return "", err
	}
	defer pool.Close(ctx)
	out, err := pool.Call(ctx, timeout, "protocol_version", []byte("{}"))
	if err != nil {
		return "", fmt.Errorf("protocol_version: %w", err)
	}
	var v string
	if err := json.Unmarshal(out, &v); err != nil {
		return "", fmt.Errorf("protocol_version: %w: want a JSON string, got %.60q", eval.ErrInvalidResponse, out)
	}
	return v, nil
}

// Call runs a waPC operation on an instance of the pool.
func (e *Evaluator) Call(ctx context.Context, operation string, payload []byte) ([]byte, time.Duration, error) {
	out, err := e.pool.Call(e.cfg.WithHostCalls(ctx), e.cfg.Timeout, operation, payload)
	return out, 0, err
}

// Mode is kubewarden-wapc.
func (e *Evaluator) Mode() string { return metadata.ExecutionModeWapc }

// Digest is the compiled module's digest.
func (e *Evaluator) Digest() string { return e.mod.Digest() }

// ValidateSettings calls the module's validate_settings.
func (e *Evaluator) ValidateSettings(ctx context.Context) error {
	return e.cfg.ValidateSettings(ctx, e)
}

// Evaluate calls the module's validate.
func (e *Evaluator) Evaluate(ctx context.Context, req eval.Request) (*eval.Result, error) {
	return e.cfg.Evaluate(ctx, e, req, true)
}

// Instances is how many instances are alive now, and the most the pool keeps
// (of the shared pool when the policy shares one).
func (e *Evaluator) Instances() (live, size int) { return e.pool.Live(), e.pool.Size() }

// InstanceMemory is the linear memory of the pool's live instances, in bytes.
func (e *Evaluator) InstanceMemory() int64 { return e.pool.MemoryBytes() }

// SharesInstances reports whether the pool is shared with other policies.
func (e *Evaluator) SharesInstances() bool { return e.shared != nil }

// Close stops the policy's instances (gives back its place in a shared
// pool) and releases its module.
func (e *Evaluator) Close(ctx context.Context) {
	if e.shared != nil {
		// Only the first Close gives back the policy's place in the pool.
		e.leave.Do(func() { e.shared.host.releasePool(ctx, e.shared) })
	} else {
		e.pool.Close(ctx)
	}
	e.mod.Release()
}

// hintWasi adds a hint to the error of a module compiled as waPC that is a
// WASI command (it exports _start but not __guest_call): without metadata it
// needs -e wasi, as with kwctl.
func hintWasi(err error, module []byte) error {
	if !errors.Is(err, wasm.ErrNotWapc) {
		return err
	}
	exports, xerr := wasmbin.Exports(module)
	if xerr != nil || !wasmbin.HasFuncExport(exports, "_start") {
		return err
	}
	return fmt.Errorf("%w; it exports _start: a WASI command runs with executionMode wasi (-e wasi, or executionMode: wasi in its metadata)", err)
}
