package opa

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

var (
	// ErrNotOPA: the module is not an OPA Wasm module (it lacks the ABI's exports or imports).
	ErrNotOPA = errors.New("module is not an OPA Wasm module")
	// ErrABIVersion: the module's OPA Wasm ABI version is not one this package speaks (1.x).
	ErrABIVersion = errors.New("unsupported OPA Wasm ABI version")
	// ErrMissingBuiltins: the module needs builtins the host does not offer.
	ErrMissingBuiltins = errors.New("the module needs builtins tollgate does not offer")
	// ErrOutputLimit: the result is larger than the limit.
	ErrOutputLimit = errors.New("policy result exceeds its limit")
	// ErrBadData: the data document (or the input) is not JSON the module parses.
	ErrBadData = errors.New("document not accepted by the module")
)

// DefaultMaxOutputBytes caps a result when Config.MaxOutputBytes is zero.
const DefaultMaxOutputBytes = 16 << 20

// ABIMajor is the OPA Wasm ABI major version this package speaks.
const ABIMajor = 1

// Config configures a compiled module.
type Config struct {
	// MemoryLimitBytes caps each instance's linear memory (wasm.DefaultMemoryLimit when zero).
	MemoryLimitBytes uint64
	// MaxOutputBytes caps the result of an evaluation (DefaultMaxOutputBytes when zero).
	MaxOutputBytes int
	// PoolSize is the most instances kept (1 when zero).
	PoolSize int
	// Data is the data document loaded into every instance (JSON; empty is {}).
	Data []byte
	// Logger receives opa_println and trace output. Nil discards it.
	Logger *slog.Logger
	// DisableInstrumentation bounds the guest by wazero's close-on-context-done
	// instead of an interrupt check compiled into the module.
	DisableInstrumentation bool
	// Engine, when set, compiles the module as it compiles every other
	// policy's: screened with its structural limits, in a compiler process
	// with its time and memory budget (so a module that would take the server
	// down while compiling fails alone), through its load cache. Nil
	// compiles in this process with the given cache and the default limits.
	// It also counts the module against the engine's memory budget
	// (Engine.Reserve) until Close: its machine code
	// (wasm.EstimatedCodeBytes) and the initial linear memory of the instance
	// started at Compile, as the engine counts a waPC module and its first
	// instance.
	Engine *wasm.Engine
}

// Module is a compiled OPA module with a pool of instances. It is safe for
// concurrent use.
type Module struct {
	rt          wazero.Runtime
	cm          wazero.CompiledModule
	cache       wazero.CompilationCache // the load-cache entry's (nil: none), closed with the module
	stubbed     bool                    // loaded from its load-cache entry
	cfg         Config
	interrupt   string // the interrupt global of the instrumented module, "" if not instrumented
	builtins    map[int32]builtin
	entrypoints map[string]int32
	major       int32
	minor       int32

	slots chan struct{}
	idle  chan *instance

	mu     sync.Mutex
	closed bool
	live   int
	// unreserve gives back what the module counts against Config.Engine's
	// memory budget, at Close.
	unreserve func()
}

// Compile compiles an OPA module with the given compilation cache (nil: an
// in-memory one) and starts one instance: the ABI version, the builtins the
// module needs and the data document are checked here.
func Compile(ctx context.Context, cache wazero.CompilationCache, code []byte, cfg Config) (*Module, error) {
	exports, err := wasmbin.Exports(code)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"eval", "builtins", "entrypoints", "opa_malloc", "opa_json_parse", "opa_json_dump", "opa_heap_ptr_get", "opa_heap_ptr_set", "opa_eval_ctx_new", "opa_eval_ctx_set_input", "opa_eval_ctx_set_data", "opa_eval_ctx_set_entrypoint", "opa_eval_ctx_get_result"} {
		if !wasmbin.HasFuncExport(exports, name) {
			return nil, fmt.Errorf("%w: no %s export", ErrNotOPA, name)
		}
	}
	screen := wasm.Screen
	if cfg.Engine != nil {
		screen = cfg.Engine.Screen // its limits
	}
	if err := screen(code); err != nil {
		return nil, err
	}
	code, err = defineMemory(code)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotOPA, err)
	}
	if cfg.MemoryLimitBytes == 0 {
		cfg.MemoryLimitBytes = wasm.DefaultMemoryLimit
	}
	unreserve := func() {}
	if cfg.Engine != nil {
		mem, _, _ := wasmbin.InitialMemory(code)
		if unreserve, err = cfg.Engine.Reserve(wasm.EstimatedCodeBytes(len(code)) + int64(min(mem, cfg.MemoryLimitBytes))); err != nil {
			return nil, err
		}
	}
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(bytes.TrimSpace(cfg.Data)) == 0 {
		cfg.Data = []byte("{}")
	}
	if cache == nil {
		cache = wazero.NewCompilationCache()
	}
	m := &Module{cfg: cfg, unreserve: unreserve}
	if !cfg.DisableInstrumentation {
		if inst, global, err := wasmbin.Instrument(code); err == nil {
			code, m.interrupt = inst, global
		} else {
			cfg.Logger.Debug("module not instrumented for interruption; using wazero's close-on-context-done", "error", err)
		}
	}
	rctx := context.WithoutCancel(ctx)
	closeOnDone := m.interrupt == ""
	// compile makes a runtime with the env imports on cache and compiles
	// code on it (a wasm.CompileFunc).
	compile := func(ctx context.Context, code []byte, cache wazero.CompilationCache) (compiled, func(), error) {
		rt := wazero.NewRuntimeWithConfig(rctx, wasm.NewRuntimeConfig(cache).WithCloseOnContextDone(closeOnDone))
		if err := instantiateEnv(rctx, rt); err != nil {
			_ = rt.Close(rctx)
			return compiled{}, nil, err
		}
		cm, err := rt.CompileModule(ctx, code)
		if err != nil {
			_ = rt.Close(rctx)
			return compiled{}, nil, wasm.CompileError(code, err)
		}
		return compiled{rt, cm}, func() { _ = rt.Close(rctx) }, nil
	}
	var c compiled
	if cfg.Engine != nil {
		// The key names the module as it runs (instrumented, its memory
		// defined), so a change of either transformation is a new entry.
		key := loadCacheVersion + "-" + strings.TrimPrefix(wasm.Digest(code), "sha256:")
		c, m.cache, m.stubbed, err = wasm.LoadCached(ctx, cfg.Engine, key, closeOnDone, func() ([]byte, error) { return code, nil }, compile)
	} else {
		c, _, err = compile(ctx, code, cache)
	}
	if err != nil {
		unreserve()
		return nil, err
	}
	m.rt, m.cm = c.rt, c.cm
	fail := func(err error) (*Module, error) {
		_ = m.rt.Close(rctx)
		if m.cache != nil {
			_ = m.cache.Close(rctx)
		}
		unreserve()
		return nil, err
	}
	m.slots = make(chan struct{}, cfg.PoolSize)
	m.idle = make(chan *instance, cfg.PoolSize)
	for range cfg.PoolSize - 1 {
		m.slots <- struct{}{}
	}
	inst, err := m.newInstance(ctx)
	if err != nil {
		return fail(err)
	}
	m.idle <- inst
	return m, nil
}

// ABIVersion is the module's OPA Wasm ABI version.
func (m *Module) ABIVersion() (major, minor int) { return int(m.major), int(m.minor) }

// FastPath reports whether evaluations use the one-call opa_eval (ABI 1.2+).
func (m *Module) FastPath() bool { return m.minor >= 2 }

// Entrypoints is the module's {name: id} of entrypoints.
func (m *Module) Entrypoints() map[string]int32 { return m.entrypoints }

// HostBuiltins lists the builtins the module leaves to the host.
func (m *Module) HostBuiltins() []string {
	var names []string
	for _, b := range m.builtins {
		names = append(names, b.name)
	}
	return names
}

// Interruptible reports whether the module was instrumented with an interrupt check.
func (m *Module) Interruptible() bool { return m.interrupt != "" }

// Size is the most instances the pool keeps; Live how many exist now.
func (m *Module) Size() int { return cap(m.slots) }

// Live is how many instances exist now.
func (m *Module) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// Close closes the idle instances and the module; busy instances end with
// their evaluation.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	err := m.rt.Close(ctx)
	if m.cache != nil {
		_ = m.cache.Close(ctx)
	}
	m.unreserve()
	return err
}

// FromLoadCache reports whether the module was loaded from its load-cache
// entry (its stub compiled from the cache only) rather than compiled.
func (m *Module) FromLoadCache() bool { return m.stubbed }

// loadCacheVersion names the load-cache entries of OPA modules
// (wasm.LoadCached): bump it when what a compiled entry holds changes
// meaning.
const loadCacheVersion = "opa-v1"

// compiled is a runtime with the env imports and the module compiled on it.
type compiled struct {
	rt wazero.Runtime
	cm wazero.CompiledModule
}

// Data is a data document for Eval, parsed by each instance the first time
// it is given and kept until another Data replaces it: evaluations that
// share one Data (the cluster objects of a context-aware policy, unchanged
// since the last evaluation) parse it once per instance. Make one per
// document; never change its bytes.
type Data struct{ json []byte }

// NewData makes a Data of a JSON document.
func NewData(doc []byte) *Data { return &Data{json: doc} }

// Len is the document's size in bytes.
func (d *Data) Len() int { return len(d.json) }

// Eval evaluates entrypoint 0 on input (JSON) against the data document of
// Config.Data, or against data when it is not nil, and returns the result as
// the ABI gives it: `[{"result": value}]`, or `[]` when the entrypoint is
// undefined. The timeout (zero: ctx alone) covers waiting for an instance
// and the evaluation. Failures wrap wasm.ErrTrap (opa_abort, a failing
// builtin, a guest trap), wasm.ErrTimeout, wasm.ErrMemoryLimit,
// ErrOutputLimit or ErrBadData.
func (m *Module) Eval(ctx context.Context, timeout time.Duration, input []byte, data *Data) ([]byte, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	inst, err := m.acquire(ctx)
	if err != nil {
		return nil, err
	}
	out, broken, err := inst.eval(ctx, input, data)
	if err == nil && ctx.Err() != nil {
		err, broken = fmt.Errorf("%w after %s (the module answered after its deadline)", wasm.ErrTimeout, timeout), true
	}
	if broken {
		m.discard(inst)
	} else {
		m.put(inst)
	}
	if err != nil && errors.Is(err, wasm.ErrTimeout) && timeout > 0 && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return out, err
}

func (m *Module) acquire(ctx context.Context) (*instance, error) {
	select {
	case inst := <-m.idle:
		return inst, nil
	default:
	}
	select {
	case inst := <-m.idle:
		return inst, nil
	case <-m.slots:
		if m.isClosed() {
			m.slots <- struct{}{}
			return nil, wasm.ErrClosed
		}
		inst, err := m.newInstance(ctx)
		if err != nil {
			m.slots <- struct{}{}
			return nil, err
		}
		return inst, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: no free instance before the deadline (pool of %d busy)", wasm.ErrTimeout, cap(m.slots))
	}
}

func (m *Module) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Module) put(inst *instance) {
	if m.isClosed() {
		m.discard(inst)
		return
	}
	m.idle <- inst
}

func (m *Module) discard(inst *instance) {
	_ = inst.mod.Close(context.Background())
	m.mu.Lock()
	m.live--
	m.mu.Unlock()
	m.slots <- struct{}{}
}

// instance is one live module instance with its data loaded.
type instance struct {
	m         *Module
	mod       api.Module
	mem       api.Memory
	interrupt api.MutableGlobal
	refused   func() bool

	malloc, jsonParse, jsonDump, heapGet, heapSet api.Function
	ctxNew, setInput, setData, setEntrypoint      api.Function
	evalFn, getResult, opaEval                    api.Function

	// dataAddr is the loaded data; base the heap pointer after it, where
	// every evaluation starts.
	dataAddr, base uint32
	// ext is the last Data given to Eval, parsed at extAddr above base;
	// extHeap is the heap pointer after it (nil: none loaded).
	ext              *Data
	extAddr, extHeap uint32

	state *evalState // the evaluation in progress (nil between evaluations)
}

type instanceKey struct{}

func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	inst := &instance{m: m}
	ictx, refused := wasm.WithMemoryCap(context.WithValue(ctx, instanceKey{}, inst), m.cfg.MemoryLimitBytes)
	inst.refused = refused
	mod, err := m.rt.InstantiateModule(ictx, m.cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		switch {
		case refused():
			return nil, fmt.Errorf("%w: %w while starting (limit %d bytes): %v", wasm.ErrInstantiate, wasm.ErrMemoryLimit, m.cfg.MemoryLimitBytes, err)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w: %w while starting: %v", wasm.ErrInstantiate, wasm.ErrTimeout, err)
		}
		return nil, fmt.Errorf("%w: %v", wasm.ErrInstantiate, err)
	}
	inst.mod, inst.mem = mod, mod.Memory()
	fail := func(err error) (*instance, error) {
		_ = mod.Close(context.Background())
		return nil, err
	}
	if m.interrupt != "" {
		g, ok := mod.ExportedGlobal(m.interrupt).(api.MutableGlobal)
		if !ok {
			return fail(fmt.Errorf("%w: the instrumented module does not export the mutable global %s", wasm.ErrInstantiate, m.interrupt))
		}
		inst.interrupt = g
		// wasmbin.Instrument exports the start section's function instead:
		// it runs here, interruptible, before anything else.
		if f := mod.ExportedFunction(wasmbin.StartExport); f != nil {
			stop := context.AfterFunc(ctx, func() { g.Set(1) })
			_, err := f.Call(ctx)
			stop()
			if err != nil {
				if ctx.Err() != nil {
					return fail(fmt.Errorf("%w: %w in the start function: %v", wasm.ErrInstantiate, wasm.ErrTimeout, err))
				}
				return fail(fmt.Errorf("%w: the start function: %v", wasm.ErrInstantiate, err))
			}
		}
	}
	if m.major == 0 {
		// The first instance: the ABI version, the builtins, the entrypoints.
		if err := m.readABI(mod); err != nil {
			return fail(err)
		}
	}
	fns := map[string]*api.Function{
		"opa_malloc": &inst.malloc, "opa_json_parse": &inst.jsonParse, "opa_json_dump": &inst.jsonDump,
		"opa_heap_ptr_get": &inst.heapGet, "opa_heap_ptr_set": &inst.heapSet,
		"opa_eval_ctx_new": &inst.ctxNew, "opa_eval_ctx_set_input": &inst.setInput,
		"opa_eval_ctx_set_data": &inst.setData, "opa_eval_ctx_set_entrypoint": &inst.setEntrypoint,
		"eval": &inst.evalFn, "opa_eval_ctx_get_result": &inst.getResult, "opa_eval": &inst.opaEval,
	}
	for name, f := range fns {
		*f = mod.ExportedFunction(name)
	}
	if m.minor < 2 {
		inst.opaEval = nil
	}
	if m.builtins == nil {
		ids, err := inst.readMap(ctx, "builtins")
		if err != nil {
			return fail(err)
		}
		if m.builtins, err = resolveBuiltins(ids); err != nil {
			return fail(err)
		}
		if m.entrypoints, err = inst.readMap(ctx, "entrypoints"); err != nil {
			return fail(err)
		}
		if len(m.entrypoints) == 0 {
			return fail(fmt.Errorf("%w: the module has no entrypoint (build it with opa build -t wasm -e <entrypoint>)", ErrNotOPA))
		}
	}
	// Load the data document once: every evaluation reuses it.
	st := &evalState{ctx: ctx, now: time.Now(), logger: m.cfg.Logger}
	inst.state = st
	defer func() { inst.state = nil }()
	if inst.dataAddr, err = inst.loadJSON(ctx, m.cfg.Data); err != nil {
		return fail(fmt.Errorf("data: %w", inst.classify(ctx, err)))
	}
	if inst.base, err = inst.call1(ctx, inst.heapGet); err != nil {
		return fail(inst.classify(ctx, err))
	}
	m.mu.Lock()
	m.live++
	m.mu.Unlock()
	return inst, nil
}

// readABI reads the ABI version globals and refuses versions other than 1.x.
func (m *Module) readABI(mod api.Module) error {
	major, minor := mod.ExportedGlobal("opa_wasm_abi_version"), mod.ExportedGlobal("opa_wasm_abi_minor_version")
	if major == nil || minor == nil || major.Type() != api.ValueTypeI32 || minor.Type() != api.ValueTypeI32 {
		return fmt.Errorf("%w: the module exports no i32 globals opa_wasm_abi_version and opa_wasm_abi_minor_version", ErrABIVersion)
	}
	m.major, m.minor = int32(major.Get()), int32(minor.Get())
	if m.major != ABIMajor {
		return fmt.Errorf("%w: the module speaks ABI %d.%d, tollgate speaks %d.x", ErrABIVersion, m.major, m.minor, ABIMajor)
	}
	return nil
}

// readMap calls builtins() or entrypoints() and parses their {name: id}.
func (in *instance) readMap(ctx context.Context, fn string) (map[string]int32, error) {
	f := in.mod.ExportedFunction(fn)
	addr, err := in.call1(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("%s(): %w", fn, err)
	}
	s, err := in.dumpJSON(ctx, addr, in.m.cfg.MaxOutputBytes)
	if err != nil {
		return nil, fmt.Errorf("%s(): %w", fn, err)
	}
	var out map[string]int32
	if err := json.Unmarshal(s, &out); err != nil {
		return nil, fmt.Errorf("%w: %s() is not a {name: id} object: %v", ErrNotOPA, fn, err)
	}
	return out, nil
}

// eval runs one evaluation; broken says the instance must be discarded.
func (in *instance) eval(ctx context.Context, input []byte, data *Data) (out []byte, broken bool, err error) {
	st := &evalState{ctx: ctx, now: time.Now(), logger: in.m.cfg.Logger}
	in.state = st
	defer func() { in.state = nil }()
	cctx := context.WithValue(ctx, instanceKey{}, in)
	if in.interrupt != nil {
		stop := context.AfterFunc(ctx, func() { in.interrupt.Set(1) })
		defer stop()
	}
	out, err = in.evalSteps(cctx, input, data)
	if err != nil {
		var bad *badDocument
		if errors.As(err, &bad) {
			return nil, false, err
		}
		return nil, true, in.classify(ctx, err)
	}
	return out, false, nil
}

// badDocument is input or data the module's JSON parser refused.
type badDocument struct{ what string }

func (b *badDocument) Error() string {
	return fmt.Sprintf("%s: the module's JSON parser refused it", b.what)
}

func (b *badDocument) Unwrap() error { return ErrBadData }

func (in *instance) evalSteps(ctx context.Context, input []byte, data *Data) ([]byte, error) {
	dataAddr, heap := in.dataAddr, in.base
	if data != nil && data == in.ext {
		dataAddr, heap = in.extAddr, in.extHeap // parsed by an earlier evaluation
	} else if data != nil {
		// A data document for this evaluation: loaded after the instance's
		// own, which the next evaluation may use again, and kept for the
		// next evaluations given the same Data.
		in.ext = nil
		if _, err := in.heapSet.Call(ctx, uint64(in.base)); err != nil {
			return nil, err
		}
		addr, err := in.loadJSON(ctx, data.json)
		if err != nil {
			return nil, err
		}
		h, err := in.call1(ctx, in.heapGet)
		if err != nil {
			return nil, err
		}
		dataAddr, heap = addr, h
		in.ext, in.extAddr, in.extHeap = data, addr, h
	}
	if in.opaEval != nil {
		// ABI 1.2: input written at the heap pointer, one call.
		if err := in.ensure(heap, len(input)); err != nil {
			return nil, err
		}
		in.mem.Write(heap, input)
		end := heap + uint32(len(input))
		res, err := in.opaEval.Call(ctx, 0, 0, uint64(dataAddr), uint64(heap), uint64(len(input)), uint64(end), 0)
		if err != nil {
			return nil, err
		}
		return in.readString(uint32(res[0]), in.m.cfg.MaxOutputBytes)
	}
	// ABI 1.0/1.1: the eval-context calls.
	if _, err := in.heapSet.Call(ctx, uint64(heap)); err != nil {
		return nil, err
	}
	inAddr, err := in.loadJSON(ctx, input)
	if err != nil {
		var bad *badDocument
		if errors.As(err, &bad) {
			bad.what = "input"
		}
		return nil, err
	}
	ectx, err := in.call1(ctx, in.ctxNew)
	if err != nil {
		return nil, err
	}
	for _, c := range []struct {
		f   api.Function
		arg uint64
	}{{in.setInput, uint64(inAddr)}, {in.setData, uint64(dataAddr)}, {in.setEntrypoint, 0}} {
		if _, err := c.f.Call(ctx, uint64(ectx), c.arg); err != nil {
			return nil, err
		}
	}
	if _, err := in.evalFn.Call(ctx, uint64(ectx)); err != nil {
		return nil, err
	}
	res, err := in.call1(ctx, in.getResult, uint64(ectx))
	if err != nil {
		return nil, err
	}
	return in.dumpJSON(ctx, res, in.m.cfg.MaxOutputBytes)
}

// classify maps a failed call to the package's errors.
func (in *instance) classify(ctx context.Context, err error) error {
	st := in.state
	var bad *badDocument
	switch {
	case errors.As(err, &bad):
		return err
	case in.refused():
		return fmt.Errorf("%w (limit %d bytes): %v", wasm.ErrMemoryLimit, in.m.cfg.MemoryLimitBytes, err)
	case errors.Is(err, ErrOutputLimit):
		return err
	case st != nil && st.abort != "":
		return fmt.Errorf("%w: opa_abort: %s", wasm.ErrTrap, st.abort)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %v", wasm.ErrTimeout, ctx.Err())
	case st != nil && st.err != nil:
		return fmt.Errorf("%w: %w", wasm.ErrTrap, st.err)
	}
	return fmt.Errorf("%w: %v", wasm.ErrTrap, err)
}

func (in *instance) call1(ctx context.Context, f api.Function, args ...uint64) (uint32, error) {
	r, err := f.Call(ctx, args...)
	if err != nil {
		return 0, err
	}
	if len(r) != 1 {
		return 0, fmt.Errorf("%w: a function returned %d values, want 1", ErrNotOPA, len(r))
	}
	return uint32(r[0]), nil
}

// ensure grows the memory so that n bytes fit at addr.
func (in *instance) ensure(addr uint32, n int) error {
	need := uint64(addr) + uint64(n)
	size := uint64(in.mem.Size())
	if need <= size {
		return nil
	}
	pages := (need - size + 65535) / 65536
	if _, ok := in.mem.Grow(uint32(pages)); !ok {
		return fmt.Errorf("%w: %d bytes of input do not fit (limit %d bytes)", wasm.ErrMemoryLimit, n, in.m.cfg.MemoryLimitBytes)
	}
	return nil
}

// loadJSON copies a JSON document into the guest (opa_malloc) and parses it
// (opa_json_parse); it returns the value's address.
func (in *instance) loadJSON(ctx context.Context, doc []byte) (uint32, error) {
	addr, err := in.call1(ctx, in.malloc, uint64(len(doc)))
	if err != nil {
		return 0, err
	}
	if !in.mem.Write(addr, doc) {
		return 0, fmt.Errorf("%w: opa_malloc(%d) returned %#x, outside the memory", wasm.ErrTrap, len(doc), addr)
	}
	v, err := in.call1(ctx, in.jsonParse, uint64(addr), uint64(len(doc)))
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, &badDocument{what: "data"}
	}
	return v, nil
}

// dumpJSON serialises a value (opa_json_dump) and returns a copy of the JSON.
func (in *instance) dumpJSON(ctx context.Context, v uint32, limit int) ([]byte, error) {
	s, err := in.call1(ctx, in.jsonDump, uint64(v))
	if err != nil {
		return nil, err
	}
	return in.readString(s, limit)
}

// readString copies the NUL-terminated string at addr, of at most limit bytes.
func (in *instance) readString(addr uint32, limit int) ([]byte, error) {
	size := in.mem.Size()
	if addr >= size {
		return nil, fmt.Errorf("%w: a string at %#x, outside the memory (%d bytes)", wasm.ErrTrap, addr, size)
	}
	b, _ := in.mem.Read(addr, size-addr)
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return nil, fmt.Errorf("%w: the string at %#x is not NUL-terminated", wasm.ErrTrap, addr)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: the result is %d bytes, the limit is %d", ErrOutputLimit, n, limit)
	}
	return bytes.Clone(b[:n]), nil
}
