package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
	"github.com/wapc/wapc-go"
	wapcwazero "github.com/wapc/wapc-go/engines/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// compiledModule is a compiled waPC module, shared by every reference to it
// (Module) and every pool created from them.
type compiledModule struct {
	wm *wapcwazero.Module
	// cache is the module's own compilation cache (load cache), closed with it; nil when it uses the engine's.
	cache   wazero.CompilationCache
	digest  string
	memCap  uint64
	exports []wasmbin.Export
	// interrupt is the exported interrupt global of the instrumented module
	// (wasmbin.Instrument), or "" when the module runs with wazero's
	// close-on-context-done.
	interrupt string
	// eng accounts codeBytes, the size of the module's machine code, and
	// its pools' instance memory against its memory budget.
	eng       *Engine
	codeBytes int64
}

// Module is one reference to a compiled waPC module: Engine.Compile returns
// a new one each time, all sharing the module compiled once per digest and
// memory limit, which is closed when the last reference is released.
type Module struct {
	*compiledModule
	release func()
	once    sync.Once
}

func (m *compiledModule) close(ctx context.Context) {
	if m.eng != nil {
		m.eng.used.Add(-m.codeBytes)
	}
	_ = m.wm.Close(ctx)
	if m.cache != nil {
		_ = m.cache.Close(ctx)
	}
}

// Digest is the module's sha256 digest ("sha256:<hex>").
func (m *Module) Digest() string { return m.digest }

// Interruptible reports whether the module was instrumented with an interrupt
// check (wasmbin.Instrument) rather than bounded by wazero's close-on-context-done.
func (m *Module) Interruptible() bool { return m.interrupt != "" }

// MemoryLimitBytes is the linear-memory cap of this module's instances.
func (m *Module) MemoryLimitBytes() uint64 { return m.memCap }

// Release gives back the reference taken by Engine.Compile (a second Release
// of the same reference does nothing). The module is closed when its last
// reference is released; pools must be closed first.
func (m *Module) Release() { m.once.Do(m.release) }

// HostCallHandler answers a guest's waPC host call. It must return when ctx is
// done; the pool also stops waiting for it then.
type HostCallHandler func(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error)

type hostCallKey struct{}

// hostCall is the handler a context carries, and whether it runs inline.
type hostCall struct {
	h      HostCallHandler
	inline bool
}

// WithHostCallHandler attaches the handler that answers the host calls a guest
// makes during calls made with the returned context. It runs on a goroutine
// of its own, and the guest stops waiting for it at the call's deadline.
func WithHostCallHandler(ctx context.Context, h HostCallHandler) context.Context {
	return context.WithValue(ctx, hostCallKey{}, hostCall{h: h})
}

// WithInlineHostCallHandler is WithHostCallHandler for a handler that itself
// returns by its context's deadline (host/capabilities' handlers do): it runs
// on the guest's goroutine, which saves two goroutine switches per host call
// (about 40 us of a 65 us round trip on a busy 2-core machine).
func WithInlineHostCallHandler(ctx context.Context, h HostCallHandler) context.Context {
	return context.WithValue(ctx, hostCallKey{}, hostCall{h: h, inline: true})
}

// dispatchHostCall is the single waPC host-call entry of every module: it
// forwards to the handler carried by the call's context, and stops waiting for
// it when the call's deadline passes (a handler that blocks cannot hold a
// guest past its deadline).
func dispatchHostCall(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
	hc, _ := ctx.Value(hostCallKey{}).(hostCall)
	h := hc.h
	if h == nil {
		return nil, fmt.Errorf("%w: no host capabilities are available for %s/%s/%s", ErrHostCall, binding, namespace, operation)
	}
	if hc.inline {
		return callInline(ctx, h, binding, namespace, operation, payload)
	}
	type result struct {
		b   []byte
		err error
	}
	// payload is a view of the guest's memory, which may be unmapped once
	// the guest has given up on this call (mappedMemory): the handler, which
	// may outlive it, gets a copy.
	payload = append([]byte(nil), payload...)
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("%w: %s/%s/%s panicked: %v", ErrHostCall, binding, namespace, operation, r)}
			}
		}()
		b, err := h(ctx, binding, namespace, operation, payload)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s/%s/%s did not answer before the deadline: %v", ErrHostCall, binding, namespace, operation, ctx.Err())
	}
}

// callInline runs an inline handler, a panic becoming an error as on the
// watchdog path.
func callInline(ctx context.Context, h HostCallHandler, binding, namespace, operation string, payload []byte) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("%w: %s/%s/%s panicked: %v", ErrHostCall, binding, namespace, operation, r)
		}
	}()
	return h(ctx, binding, namespace, operation, payload)
}

// instance is one live guest instance and the allocator that tracks its memory cap.
type instance struct {
	wi    wapc.Instance
	alloc *cappedAllocator
	// size is the linear memory's size after the last call (or the start
	// functions), in bytes; called is whether it served a call.
	size   uint32
	called bool
}

// enter and leave bracket a call on the instance: its mapped memory is not
// unmapped meanwhile, even if its module is closed (mappedMemory).
func (i *instance) enter() {
	if m := i.alloc.mem; m != nil {
		m.enter()
	}
}

func (i *instance) leave() {
	if m := i.alloc.mem; m != nil {
		m.leave()
	}
}

// Pool hands out instances of one module for calls. It creates instances on
// demand, up to its size; a call waits for a free instance (or its context).
// An instance that trapped, timed out or hit its memory cap is closed and its
// slot freed for a fresh one.
//
// An instance whose linear memory grew by more than PoolConfig.RecycleGrowth
// during one call (its first excepted) is closed after it, and the next call
// that needs one starts a fresh instance: the memory a large request made a
// guest grow, which a Wasm memory never gives back, is returned.
type Pool struct {
	mod     *Module
	slots   chan struct{}  // one token per instance that may exist
	idle    chan *instance // instances ready for a call
	recycle uint64         // PoolConfig.RecycleGrowth
	start   time.Duration  // PoolConfig.StartTimeout

	// memory is the linear memory of the live instances, in bytes.
	memory atomic.Int64

	mu     sync.Mutex
	closed bool
	live   int
}

// PoolConfig configures a pool.
type PoolConfig struct {
	// Size is the most instances the pool keeps (at least 1).
	Size int
	// RecycleGrowth: an instance whose linear memory grew by more than this
	// many bytes during one call is closed once the call returns (its
	// answer is kept), to be replaced when needed. An instance's first call
	// does not count: it is where a guest initializes what it keeps (the
	// MutatingAdmissionPolicy guest's CEL environment, 10 MB). Zero keeps
	// instances whatever their size (up to the module's memory cap).
	RecycleGrowth uint64
	// StartTimeout bounds the start of each instance (the module's start
	// function, `_initialize`, `_start`), on top of the context it starts
	// with: a start that loops fails with ErrInstantiate and ErrTimeout.
	// Zero means DefaultStartTimeout.
	StartTimeout time.Duration
}

// DefaultStartTimeout is PoolConfig.StartTimeout when it is zero.
const DefaultStartTimeout = 10 * time.Second

// DefaultRecycleGrowth is the PoolConfig.RecycleGrowth of NewPool: a TinyGo
// guest grows 12 MB evaluating a 3 MB object and keeps it; a 5 KB Pod grows
// none by more than a few pages.
const DefaultRecycleGrowth = 8 << 20

// NewPool creates a pool of up to size instances, with DefaultRecycleGrowth
// (see NewPoolConfig).
func (m *Module) NewPool(ctx context.Context, size int) (*Pool, error) {
	return m.NewPoolConfig(ctx, PoolConfig{Size: size, RecycleGrowth: DefaultRecycleGrowth})
}

// NewPoolConfig creates a pool and instantiates one instance now, so that a
// module that cannot start fails here rather than on the first call.
func (m *Module) NewPoolConfig(ctx context.Context, c PoolConfig) (*Pool, error) {
	size := max(c.Size, 1)
	p := &Pool{mod: m, slots: make(chan struct{}, size), idle: make(chan *instance, size), recycle: c.RecycleGrowth, start: c.StartTimeout}
	if p.start <= 0 {
		p.start = DefaultStartTimeout
	}
	for i := 0; i < size; i++ {
		p.slots <- struct{}{}
	}
	<-p.slots
	inst, err := p.newInstance(ctx)
	if err != nil {
		p.slots <- struct{}{}
		return nil, err
	}
	if e := m.eng; e != nil {
		if err := e.checkBudget(); err != nil {
			p.discard(inst)
			return nil, err
		}
	}
	p.idle <- inst
	return p, nil
}

func (p *Pool) newInstance(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, p.start)
	defer cancel()
	alloc := &cappedAllocator{limit: p.mod.memCap, mapped: true}
	ictx := experimental.WithMemoryAllocator(ctx, alloc)
	wi, err := p.mod.wm.Instantiate(ictx)
	if alloc.mem != nil {
		alloc.mem.leave() // the start is over (Allocate counted it)
	}
	if err != nil {
		if alloc.hit.Load() {
			return nil, fmt.Errorf("%w: %w while starting (limit %d bytes): %v", ErrInstantiate, ErrMemoryLimit, p.mod.memCap, err)
		}
		if ctx.Err() != nil {
			// The first line: the function that ran out of time, without
			// wazero's stack trace.
			first, _, _ := strings.Cut(err.Error(), "\n")
			return nil, fmt.Errorf("%w: %w while starting (start timeout %s): %s", ErrInstantiate, ErrTimeout, p.start, first)
		}
		return nil, fmt.Errorf("%w: %v", ErrInstantiate, err)
	}
	if ctx.Err() != nil {
		// The start functions returned, but the deadline passed meanwhile: the
		// interrupt global of an instrumented module may be set (or about to be).
		_ = wi.Close(context.Background())
		return nil, fmt.Errorf("%w: %w while starting", ErrInstantiate, ErrTimeout)
	}
	p.mu.Lock()
	p.live++
	p.mu.Unlock()
	inst := &instance{wi: wi, alloc: alloc, size: wi.MemorySize()}
	p.account(int64(inst.size))
	return inst, nil
}

// account adds d bytes to the linear memory of the pool's live instances,
// and of the engine's.
func (p *Pool) account(d int64) {
	p.memory.Add(d)
	if e := p.mod.eng; e != nil {
		e.used.Add(d)
	}
}

// MemoryBytes is the linear memory of the pool's live instances, in bytes
// (the size the guests grew it to; the pages they touched are resident).
func (p *Pool) MemoryBytes() int64 { return p.memory.Load() }

// Size is the most instances the pool keeps.
func (p *Pool) Size() int { return cap(p.slots) }

// Live is how many instances exist now.
func (p *Pool) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// Call invokes a waPC operation with the given deadline on a pooled instance.
// The deadline covers waiting for an instance, the guest, and its host calls.
func (p *Pool) Call(ctx context.Context, timeout time.Duration, operation string, payload []byte) ([]byte, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	inst, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	inst.enter()
	out, err := inst.wi.Invoke(ctx, operation, payload)
	if err == nil && ctx.Err() == nil {
		// out is a view of the guest's linear memory: copy it before the
		// instance serves another call (or its memory is unmapped).
		out = append([]byte(nil), out...)
		inst.leave()
		p.done(inst)
		return out, nil
	}
	inst.leave()
	cerr, broken := p.classify(ctx, inst, timeout, err)
	if broken {
		p.discard(inst)
	} else {
		p.done(inst)
	}
	return nil, cerr
}

// done returns an instance after a call: to the idle ones, or closed when
// the call grew its memory by more than the pool's RecycleGrowth.
func (p *Pool) done(inst *instance) {
	first := !inst.called
	inst.called = true
	if size := inst.wi.MemorySize(); size != inst.size {
		grown := uint64(size - inst.size)
		p.account(int64(size) - int64(inst.size))
		inst.size = size
		if p.recycle > 0 && !first && grown > p.recycle {
			p.discard(inst)
			return
		}
	}
	p.put(inst)
}

// classify maps the outcome of a call that failed or ended after its deadline
// to one of the package's sentinel errors and says whether the instance must
// be thrown away.
func (p *Pool) classify(ctx context.Context, inst *instance, timeout time.Duration, err error) (error, bool) {
	var exit *sys.ExitError
	switch {
	case err == nil:
		// The guest answered, but only after its deadline (typically it gave up
		// on a host call that was cut at the deadline). The answer is not
		// trusted, and an instance whose context is done is not reused.
		return fmt.Errorf("%w after %s (the guest answered after its deadline)", ErrTimeout, timeout), true
	case inst.alloc.hit.Load():
		return fmt.Errorf("%w (limit %d bytes): %v", ErrMemoryLimit, p.mod.memCap, unwrapInvoke(err)), true
	case errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled):
		return fmt.Errorf("%w after %s", ErrTimeout, timeout), true
	case ctx.Err() != nil:
		// The deadline passed while the guest was answering (e.g. it gave up on a
		// host call that did not return in time). wazero closes an instance whose
		// context is done, so it cannot be reused either way.
		return fmt.Errorf("%w after %s: %v", ErrTimeout, timeout, unwrapInvoke(err)), true
	case errors.As(err, &exit):
		return fmt.Errorf("%w: the guest exited with code %d", ErrTrap, exit.ExitCode()), true
	case isGuestError(err):
		return fmt.Errorf("%w: %s", ErrGuest, err.Error()), false
	default:
		return fmt.Errorf("%w: %v", ErrTrap, unwrapInvoke(err)), true
	}
}

// isGuestError reports whether Invoke failed because the guest answered with a
// waPC error (or no response) rather than a runtime failure. wapc-go wraps
// runtime failures as "error invoking guest: ...".
func isGuestError(err error) bool {
	return errors.Unwrap(err) == nil && !strings.HasPrefix(err.Error(), "error invoking guest")
}

func unwrapInvoke(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func (p *Pool) acquire(ctx context.Context) (*instance, error) {
	// Prefer an idle instance; otherwise create one if a slot is free; otherwise wait.
	select {
	case inst := <-p.idle:
		return inst, nil
	default:
	}
	select {
	case inst := <-p.idle:
		return inst, nil
	case <-p.slots:
		if p.isClosed() {
			p.slots <- struct{}{}
			return nil, ErrClosed
		}
		inst, err := p.newInstance(ctx)
		if err != nil {
			p.slots <- struct{}{}
			return nil, err
		}
		return inst, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: no free instance before the deadline (pool of %d busy)", ErrTimeout, cap(p.slots))
	}
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Pool) put(inst *instance) {
	if p.isClosed() {
		p.discard(inst)
		return
	}
	p.idle <- inst
}

func (p *Pool) discard(inst *instance) {
	_ = inst.wi.Close(context.Background())
	p.account(-int64(inst.size))
	p.mu.Lock()
	p.live--
	p.mu.Unlock()
	p.slots <- struct{}{}
}

// Close closes idle instances now and busy ones when their call returns.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for {
		select {
		case inst := <-p.idle:
			p.discard(inst)
		default:
			return
		}
	}
}
