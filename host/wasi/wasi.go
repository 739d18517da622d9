package wasi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

var (
	// ErrNotCommand: the module does not export `_start`.
	ErrNotCommand = errors.New("module is not a WASI command (no _start export)")
	// ErrOutputLimit: the guest wrote more to stdout than the limit allows.
	// The guest is stopped when it passes the limit.
	ErrOutputLimit = errors.New("policy output exceeds its limit")
)

// Argv0 is the program name every invocation gets, as Kubewarden passes it.
const Argv0 = "policy.wasm"

// DefaultMaxOutputBytes caps stdout when Config.MaxOutputBytes is zero.
const DefaultMaxOutputBytes = 16 << 20

// mergeGap is the largest run of zeros written between two merged data segments.
const mergeGap = 4096

// maxStderrBytes is how much stderr is kept (the rest is dropped).
const maxStderrBytes = 64 << 10

// Config configures a compiled module.
type Config struct {
	// MemoryLimitBytes caps each instance's linear memory (wasm.DefaultMemoryLimit when zero).
	MemoryLimitBytes uint64
	// MaxOutputBytes caps stdout (DefaultMaxOutputBytes when zero).
	MaxOutputBytes int
	// AheadArgs and Ahead: keep Ahead instances started ahead of demand with
	// argv [Argv0, AheadArgs...]. Zero Ahead starts every instance on demand.
	AheadArgs []string
	Ahead     int
	// Engine, when set with a cache directory, compiles the module through
	// its load cache (wasm.LoadCached): a warm load compiles a stub of the
	// module from the cache instead of decoding and validating all its code.
	// Digest is the module's sha256 digest then ("sha256:<hex>", computed
	// when empty). When set, the module is screened with the engine's
	// limits and counts against its memory budget (Engine.Reserve) until
	// Close: its machine code (wasm.EstimatedCodeBytes) and the initial
	// linear memory of the Ahead instances it keeps started.
	Engine *wasm.Engine
	Digest string
}

// loadCacheVersion names the load-cache entries of WASI modules: bump it
// when what Compile makes of a module (the data merging) changes.
const loadCacheVersion = "wasi-v1-m4096"

// Module is a compiled WASI command. It is safe for concurrent use.
type Module struct {
	rt wazero.Runtime
	cm wazero.CompiledModule
	// cache is the module's load-cache entry (nil: none), closed with it;
	// stubbed: it was loaded from there (wasm.LoadCached).
	cache   wazero.CompilationCache
	stubbed bool
	// unreserve gives back what the module counts against the engine's
	// memory budget (Config.Engine), at Close.
	unreserve func()
	base      wazero.ModuleConfig
	cfg       Config
	ctx       context.Context // cancelled by Close: stops instances started ahead
	cancel    context.CancelFunc
	ahead     chan *session
	wg        sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

// Compile compiles a WASI command with the given compilation cache (nil: an
// in-memory one).
func Compile(ctx context.Context, cache wazero.CompilationCache, code []byte, cfg Config) (*Module, error) {
	exports, err := wasmbin.Exports(code)
	if err != nil {
		return nil, err
	}
	if !wasmbin.HasFuncExport(exports, "_start") {
		return nil, ErrNotCommand
	}
	screen := wasm.Screen
	if cfg.Engine != nil {
		screen = cfg.Engine.Screen // its limits
	}
	if err := screen(code); err != nil {
		return nil, err
	}
	if cfg.MemoryLimitBytes == 0 {
		cfg.MemoryLimitBytes = wasm.DefaultMemoryLimit
	}
	unreserve := func() {}
	if cfg.Engine != nil {
		mem, _, _ := wasmbin.InitialMemory(code)
		if unreserve, err = cfg.Engine.Reserve(wasm.EstimatedCodeBytes(len(code)) + int64(max(cfg.Ahead, 0))*int64(min(mem, cfg.MemoryLimitBytes))); err != nil {
			return nil, err
		}
	}
	ok := false
	defer func() {
		if !ok {
			unreserve()
		}
	}()
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if cache == nil {
		cache = wazero.NewCompilationCache()
	}
	// A standard-Go module has tens of thousands of data segments, which
	// wazero applies one by one at every instantiation: merged, they cost one
	// copy (see wasmbin.MergeData and RATIONALE.md).
	merge := func() ([]byte, error) {
		if merged, ok, err := wasmbin.MergeData(code, mergeGap); err == nil && ok {
			return merged, nil
		}
		return code, nil
	}
	rctx := context.WithoutCancel(ctx)
	var c compiled
	var mcache wazero.CompilationCache
	var stubbed bool
	if cfg.Engine != nil {
		digest := cfg.Digest
		if digest == "" {
			digest = wasm.Digest(code)
		}
		key := loadCacheVersion + "-" + strings.TrimPrefix(digest, "sha256:")
		c, mcache, stubbed, err = wasm.LoadCached(ctx, cfg.Engine, key, true, merge, compileCommand)
	} else {
		merged, _ := merge()
		c, _, err = compileCommand(ctx, merged, cache)
	}
	if err != nil {
		return nil, err
	}
	rt, cm := c.rt, c.cm
	ok = true
	m := &Module{
		rt: rt, cm: cm, cfg: cfg, cache: mcache, stubbed: stubbed, unreserve: unreserve,
		base: wazero.NewModuleConfig().WithName("").
			WithSysWalltime().WithSysNanotime().WithRandSource(rand.Reader),
	}
	m.ctx, m.cancel = context.WithCancel(rctx)
	if cfg.Ahead > 0 {
		m.ahead = make(chan *session, cfg.Ahead)
		for range cfg.Ahead {
			m.ahead <- m.start(cfg.AheadArgs)
		}
	}
	return m, nil
}

// compiled is a runtime with the WASI and host imports and the command
// compiled on it.
type compiled struct {
	rt wazero.Runtime
	cm wazero.CompiledModule
}

// compileCommand compiles code on a new runtime using cache (a
// wasm.CompileFunc).
func compileCommand(ctx context.Context, code []byte, cache wazero.CompilationCache) (compiled, func(), error) {
	rctx := context.WithoutCancel(ctx)
	rt := wazero.NewRuntimeWithConfig(rctx, wasm.NewRuntimeConfig(cache).WithCloseOnContextDone(true))
	fail := func(err error) (compiled, func(), error) {
		_ = rt.Close(rctx)
		return compiled{}, nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(rctx, rt); err != nil {
		return fail(err)
	}
	for _, name := range []string{"host", "kubewarden:javy/host"} {
		i32 := api.ValueTypeI32
		_, err := rt.NewHostModuleBuilder(name).NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(hostCall), []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}).
			WithParameterNames("binding_ptr", "binding_len", "namespace_ptr", "namespace_len", "operation_ptr", "operation_len", "payload_ptr", "payload_len").
			Export("call").Instantiate(rctx)
		if err != nil {
			return fail(err)
		}
	}
	cm, err := rt.CompileModule(ctx, code)
	if err != nil {
		return fail(wasm.CompileError(code, err))
	}
	return compiled{rt, cm}, func() { _ = rt.Close(rctx) }, nil
}

// FromLoadCache reports whether the module was loaded from its load-cache
// entry (its stub compiled from the cache only) rather than compiled.
func (m *Module) FromLoadCache() bool { return m.stubbed }

// Close stops the instances started ahead and releases the module.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	err := m.rt.Close(ctx)
	if m.cache != nil {
		_ = m.cache.Close(ctx)
	}
	m.unreserve()
	return err
}

// Result is how one invocation ended.
type Result struct {
	// Stdout is everything the guest wrote there; Stderr its first 64 KiB.
	Stdout, Stderr []byte
	// ExitCode is the code passed to proc_exit, 0 when `_start` returned.
	ExitCode uint32
	// Ahead: the instance had been started ahead of demand.
	Ahead bool
	// Start is the time from instantiation to the guest's first read of
	// stdin or host call: the module's start cost (runtime start, package
	// init). For an instance started ahead it was not spent on this invocation.
	Start time.Duration
}

// Run starts `_start` with argv [Argv0, args...] and stdin, and waits for it
// to end or for the timeout (zero: ctx alone bounds it). hostCall answers the
// `host`.`call` imports (nil: every host call fails). A trap, the timeout,
// the memory cap and the output cap are errors (wasm.ErrTrap,
// wasm.ErrTimeout, wasm.ErrMemoryLimit, ErrOutputLimit); a guest that exits
// with a non-zero code is not.
func (m *Module) Run(ctx context.Context, timeout time.Duration, args []string, stdin []byte, hostCall wasm.HostCallHandler) (*Result, error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, wasm.ErrClosed
	}
	var s *session
	if m.ahead != nil && slices.Equal(args, m.cfg.AheadArgs) {
		select {
		case s = <-m.ahead:
			s.ahead = true
			// The replacement starts once this evaluation is done, not
			// competing with it for the CPU.
			defer m.refill()
		default:
		}
	}
	if s == nil {
		s = m.start(args)
	}
	return s.run(ctx, timeout, stdin, hostCall)
}

// refill starts one instance ahead in the background to replace the one taken.
func (m *Module) refill() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		s := m.start(m.cfg.AheadArgs)
		select {
		case m.ahead <- s:
		case <-m.ctx.Done():
			s.abandon()
		}
	}()
}

// session is one instance's life.
type session struct {
	ctx     context.Context // the instance's: cancelled at the deadline, by the caller or by Close
	cancel  context.CancelFunc
	started time.Time
	ahead   bool

	stdin   pipe
	stdout  capped
	stderr  capped
	refused func() bool

	// Set before stdin.delivered is closed.
	reqCtx   context.Context
	deadline time.Time
	hostCall wasm.HostCallHandler

	timedOut atomic.Bool
	firstIn  atomic.Int64 // ns after started of the first stdin read or host call
	done     chan struct{}
	err      error
}

type sessionKey struct{}

func (m *Module) start(args []string) *session {
	s := &session{started: time.Now(), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(m.ctx)
	s.stdin = pipe{delivered: make(chan struct{}), stop: s.ctx.Done(), first: s.markFirst}
	s.stdout = capped{limit: m.cfg.MaxOutputBytes, over: s.cancel}
	s.stderr = capped{limit: maxStderrBytes, truncate: true}
	ictx, refused := withMemoryCap(context.WithValue(s.ctx, sessionKey{}, s), m.cfg.MemoryLimitBytes)
	s.refused = refused
	cfg := m.base.WithArgs(append([]string{Argv0}, args...)...).
		WithStdin(&s.stdin).WithStdout(&s.stdout).WithStderr(&s.stderr).
		WithNanosleep(s.sleep)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(s.done)
		mod, err := m.rt.InstantiateModule(ictx, m.cm, cfg)
		if mod != nil {
			_ = mod.Close(context.Background())
		}
		s.err = err
	}()
	return s
}

// sleep is the guest's nanosleep (poll_oneoff's clock subscription, what
// time.Sleep and an idle Go scheduler end in): it returns after ns, or as soon
// as the instance's context ends (its deadline, the caller's cancellation,
// Close), whichever comes first. wazero's own sleep (WithSysNanosleep) cannot
// be interrupted, so a guest sleeping past its deadline held its worker for
// the whole sleep; once this one returns, close-on-context-done stops the
// guest at its next call or loop.
func (s *session) sleep(ns int64) {
	if ns <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
	}
}

func (s *session) markFirst() {
	s.firstIn.CompareAndSwap(0, int64(time.Since(s.started)))
}

// abandon stops an instance nobody will use.
func (s *session) abandon() {
	s.cancel()
	<-s.done
}

func (s *session) run(ctx context.Context, timeout time.Duration, stdin []byte, hostCall wasm.HostCallHandler) (*Result, error) {
	s.reqCtx, s.hostCall = ctx, hostCall
	if timeout > 0 {
		s.deadline = time.Now().Add(timeout)
		t := time.AfterFunc(timeout, func() { s.timedOut.Store(true); s.cancel() })
		defer t.Stop()
	}
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	s.stdin.buf = stdin
	close(s.stdin.delivered)
	<-s.done
	s.cancel()

	res := &Result{Stdout: s.stdout.buf, Stderr: s.stderr.buf, Ahead: s.ahead, Start: time.Duration(s.firstIn.Load())}
	err := s.err
	var exit *sys.ExitError
	switch {
	case s.refused():
		return nil, fmt.Errorf("%w: %v (stderr %.200q)", wasm.ErrMemoryLimit, errOrExit(err), s.stderr.buf)
	case s.stdout.exceeded:
		return nil, fmt.Errorf("%w: more than %d bytes on stdout", ErrOutputLimit, s.stdout.limit)
	case s.timedOut.Load():
		return nil, fmt.Errorf("%w after %s", wasm.ErrTimeout, timeout)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: %w", wasm.ErrTimeout, ctx.Err())
	case err == nil:
		return res, nil
	case errors.As(err, &exit) && exit.ExitCode() != sys.ExitCodeContextCanceled && exit.ExitCode() != sys.ExitCodeDeadlineExceeded:
		res.ExitCode = exit.ExitCode()
		return res, nil
	case s.ctx.Err() != nil:
		return nil, fmt.Errorf("%w: the module was closed", wasm.ErrClosed)
	}
	return nil, fmt.Errorf("%w: %v (stderr %.200q)", wasm.ErrTrap, err, s.stderr.buf)
}

func errOrExit(err error) any {
	if err == nil {
		return "the guest ended"
	}
	return err
}

// pipe is the guest's stdin: reads wait until the invocation's document is
// delivered (an instance started ahead waits there), then read it and return
// EOF while it is empty; host-call answers are appended later.
type pipe struct {
	delivered chan struct{}
	stop      <-chan struct{}
	first     func()
	mu        sync.Mutex
	buf       []byte
}

func (p *pipe) Read(b []byte) (int, error) {
	p.first()
	select {
	case <-p.delivered:
	case <-p.stop:
		return 0, io.EOF
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	return n, nil
}

func (p *pipe) append(b []byte) {
	p.mu.Lock()
	p.buf = append(p.buf, b...)
	p.mu.Unlock()
}

// capped collects output up to limit bytes: past it, a truncating stream
// drops the rest, another records the overflow, calls over and fails the write.
type capped struct {
	limit    int
	truncate bool
	over     func()
	buf      []byte
	exceeded bool
}

func (c *capped) Write(b []byte) (int, error) {
	if len(c.buf)+len(b) <= c.limit {
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	if c.truncate {
		c.buf = append(c.buf, b[:c.limit-len(c.buf)]...)
		return len(b), nil
	}
	c.exceeded = true
	c.over()
	return 0, ErrOutputLimit
}

// hostCall is `host`.`call`: (binding, namespace, operation, payload) as
// (ptr, len) pairs in the guest's memory; 0 success, 1 error. The answer, or
// the error text, is appended to stdin.
func hostCall(ctx context.Context, mod api.Module, stack []uint64) {
	s, _ := ctx.Value(sessionKey{}).(*session)
	str := func(i int) ([]byte, bool) {
		return mod.Memory().Read(api.DecodeU32(stack[i]), api.DecodeU32(stack[i+1]))
	}
	binding, ok1 := str(0)
	namespace, ok2 := str(2)
	operation, ok3 := str(4)
	payload, ok4 := str(6)
	if s == nil || !(ok1 && ok2 && ok3 && ok4) {
		panic(fmt.Errorf("host.call: arguments out of the guest's memory"))
	}
	s.markFirst()
	select {
	case <-s.stdin.delivered:
	case <-s.ctx.Done():
		panic(sys.NewExitError(sys.ExitCodeContextCanceled))
	}
	answer, err := s.call(string(binding), string(namespace), string(operation), slices.Clone(payload))
	if err != nil {
		s.stdin.append([]byte(err.Error()))
		stack[0] = 1
		return
	}
	s.stdin.append(answer)
	stack[0] = 0
}

func (s *session) call(binding, namespace, operation string, payload []byte) ([]byte, error) {
	if s.hostCall == nil {
		return nil, fmt.Errorf("%w: no host capabilities are available for %s/%s/%s", wasm.ErrHostCall, binding, namespace, operation)
	}
	ctx := s.reqCtx
	if !s.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, s.deadline)
		defer cancel()
	}
	return s.hostCall(ctx, binding, namespace, operation, payload)
}
