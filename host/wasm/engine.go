package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
	"github.com/wapc/wapc-go"
	wapcwazero "github.com/wapc/wapc-go/engines/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// Config configures an Engine. The zero value is usable: compilation cache in
// the user cache directory, logs discarded.
type Config struct {
	// CacheDir is where wazero keeps compiled machine code across restarts,
	// and where the engine keeps its load cache of instrumented modules
	// (tollgate-load-v1-i<N>/, see loadcache.go). Empty means DefaultCacheDir().
	CacheDir string
	// DisableCache turns both on-disk caches off (an in-memory compilation
	// cache is used, and every module is instrumented at every load).
	DisableCache bool
	// Logger receives guest console output. Nil discards it.
	Logger *slog.Logger
	// DisableInstrumentation makes every module stop at its deadline through
	// wazero's close-on-context-done (a check that exits to Go at every loop
	// and call) instead of an interrupt check compiled into the module. It is
	// the mechanism used anyway for a module wasmbin.Instrument refuses.
	DisableInstrumentation bool
	// CompilationWorkers is how many goroutines compile one module's
	// functions when it is not in the compilation cache. Zero means
	// GOMAXPROCS; 1 compiles on the calling goroutine only (less memory at
	// the peak of a compile).
	CompilationWorkers int
	// CompileInProcess compiles modules in the calling process instead of
	// a compiler process with a time and memory budget (isolate.go): a
	// module that makes wazero's compiler run for ever or exhaust memory
	// then takes the process with it. For environments that cannot start
	// processes.
	CompileInProcess bool
	// CompileTimeout is the wall time a compile of one module may take,
	// and (on each of CompilationWorkers) its CPU time; zero means
	// DefaultCompileTimeout.
	CompileTimeout time.Duration
	// CompileMemoryBytes is the memory one compile may use (the compiler
	// process's address space beyond what the Go runtime reserved at its
	// start); zero means DefaultCompileMemoryBytes.
	CompileMemoryBytes uint64
	// MemoryBudgetBytes bounds the memory of what the engine holds: the
	// machine code of its compiled modules and the linear memory of the
	// live instances of their pools. A Compile or NewPool that finds it
	// exceeded fails with ErrMemoryBudget (instances a call starts later do
	// not). Zero means DefaultMemoryBudget().
	MemoryBudgetBytes uint64
	// Limits are the structural limits every module is checked against
	// before it is compiled (Screen); a zero field means its default
	// (wasmbin.DefaultLimits).
	Limits Limits
}

// DefaultCacheDir is the compilation cache used when Config.CacheDir is empty:
// $XDG_CACHE_HOME/tollgate/wazero (or the OS equivalent).
func DefaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "tollgate", "wazero")
}

// Engine compiles modules. Modules with the same digest and memory limit are
// compiled once and shared. An Engine is safe for concurrent use.
type Engine struct {
	cache      wazero.CompilationCache
	logger     *slog.Logger
	dir        string
	instrument bool
	workers    int
	limits     Limits
	loads      loadCache
	// budget is Config.MemoryBudgetBytes; used is what counts against it.
	budget uint64
	used   atomic.Int64
	// isolate: compile in compiler processes with these budgets.
	isolate        bool
	compileTimeout time.Duration
	compileMemory  uint64
	// instrumented, stubHits and screens count wasmbin.Instrument runs,
	// modules started from a stub in the load cache and Screen runs (for tests).
	instrumented, stubHits, screens atomic.Int64

	mu      sync.Mutex
	modules map[moduleKey]*moduleEntry
	closed  bool
}

type moduleKey struct {
	digest string
	memCap uint64
}

type moduleEntry struct {
	ready chan struct{}
	mod   *compiledModule
	err   error
	refs  int
}

// NewEngine creates an Engine.
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	e := &Engine{logger: cfg.Logger, modules: map[moduleKey]*moduleEntry{}, instrument: !cfg.DisableInstrumentation, workers: cfg.CompilationWorkers, limits: cfg.Limits.WithDefaults()}
	if e.workers <= 0 {
		e.workers = runtime.GOMAXPROCS(0)
	}
	e.budget = cfg.MemoryBudgetBytes
	if e.budget == 0 {
		e.budget = DefaultMemoryBudget()
	}
	e.isolate = !cfg.CompileInProcess
	e.compileTimeout, e.compileMemory = cfg.CompileTimeout, cfg.CompileMemoryBytes
	if e.compileTimeout <= 0 {
		e.compileTimeout = DefaultCompileTimeout
	}
	if e.compileMemory == 0 {
		e.compileMemory = DefaultCompileMemoryBytes
	}
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DisableCache {
		e.cache = wazero.NewCompilationCache()
	} else {
		e.dir = cfg.CacheDir
		if e.dir == "" {
			e.dir = DefaultCacheDir()
		}
		c, err := wazero.NewCompilationCacheWithDir(e.dir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", e.dir, err)
		}
		e.cache = c
		e.loads = newLoadCache(e.dir)
	}
	return e, nil
}

// Limits are the structural limits the engine checks modules against.
func (e *Engine) Limits() Limits { return e.limits }

// Screen is ScreenLimits with the engine's limits, for packages that
// compile modules of other kinds with the engine (host/wasi).
func (e *Engine) Screen(code []byte) error { return ScreenLimits(code, e.limits) }

// Modules is how many distinct compiled modules the engine holds now.
func (e *Engine) Modules() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.modules)
}

// CacheDir is the on-disk compilation cache in use, or "" when disabled.
func (e *Engine) CacheDir() string { return e.dir }

// Close releases every module and the compilation cache handle.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	mods := e.modules
	e.modules = map[moduleKey]*moduleEntry{}
	e.closed = true
	e.mu.Unlock()
	for _, m := range mods {
		<-m.ready
		if m.mod != nil {
			m.mod.close(ctx)
		}
	}
	return e.cache.Close(ctx)
}

// Digest is the sha256 digest of a module, as "sha256:<hex>".
func Digest(wasm []byte) string {
	s := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(s[:])
}

// ModuleConfig sets per-module limits.
type ModuleConfig struct {
	// MemoryLimitBytes caps each instance's linear memory. Zero means DefaultMemoryLimit.
	MemoryLimitBytes uint64
	// Digest is Digest(wasm) when the caller has computed it already (it
	// saves hashing the module again). It is trusted: a wrong value makes the
	// engine run whatever it compiled or cached under that digest.
	Digest string
}

// DefaultMemoryLimit is the linear-memory cap per instance when none is set.
const DefaultMemoryLimit = 256 << 20

// Compile compiles (or reuses) a module. Every successful Compile must be
// matched by a Module.Release.
func (e *Engine) Compile(ctx context.Context, wasm []byte, cfg ModuleConfig) (*Module, error) {
	if err := wasmbin.Check(wasm); err != nil {
		return nil, err
	}
	if uint64(len(wasm)) > e.limits.ModuleBytes {
		// Before anything reads it; Screen checks the other limits.
		return nil, fmt.Errorf("%w: %w", ErrCompile, &wasmbin.LimitError{Limit: "module size", Index: -1, Value: uint64(len(wasm)), Max: e.limits.ModuleBytes})
	}
	exports, err := wasmbin.Exports(wasm)
	if err != nil {
		return nil, err
	}
	if !wasmbin.HasFuncExport(exports, "__guest_call") {
		return nil, ErrNotWapc
	}
	if cfg.MemoryLimitBytes == 0 {
		cfg.MemoryLimitBytes = DefaultMemoryLimit
	}
	digest := cfg.Digest
	if digest == "" {
		digest = Digest(wasm)
	} else if err := checkDigest(digest); err != nil {
		return nil, err
	}
	key := moduleKey{digest: digest, memCap: cfg.MemoryLimitBytes}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if ent, ok := e.modules[key]; ok {
		ent.refs++
		e.mu.Unlock()
		<-ent.ready
		if ent.err != nil {
			e.release(key, ent)
			return nil, ent.err
		}
		return e.reference(key, ent), nil
	}
	ent := &moduleEntry{ready: make(chan struct{}), refs: 1}
	e.modules[key] = ent
	e.mu.Unlock()

	ent.mod, ent.err = e.compile(ctx, wasm, key, exports)
	if ent.err == nil {
		m := ent.mod
		if m.codeBytes <= 0 {
			// Compiled without a cache directory to measure.
			m.codeBytes = EstimatedCodeBytes(len(wasm))
		}
		m.eng = e
		e.used.Add(m.codeBytes)
		if err := e.checkBudget(); err != nil {
			m.close(ctx)
			ent.mod, ent.err = nil, err
		}
	}
	close(ent.ready)
	if ent.err != nil {
		e.release(key, ent)
		return nil, ent.err
	}
	return e.reference(key, ent), nil
}

// reference is a new Module for one reference (refs) to ent.
func (e *Engine) reference(key moduleKey, ent *moduleEntry) *Module {
	return &Module{compiledModule: ent.mod, release: func() { e.release(key, ent) }}
}

func (e *Engine) release(key moduleKey, ent *moduleEntry) {
	e.mu.Lock()
	ent.refs--
	last := ent.refs == 0
	if last && e.modules[key] == ent {
		delete(e.modules, key)
	}
	e.mu.Unlock()
	if last && ent.mod != nil {
		ent.mod.close(context.Background())
	}
}

func (e *Engine) compile(ctx context.Context, wasm []byte, key moduleKey, exports []wasmbin.Export) (*compiledModule, error) {
	// Screen once per digest, not per reference; and not at all for a
	// module started from its stub, which a load that screened it stored
	// (screenedBy): Screen reads every function body (41 MB of code in the
	// MutatingAdmissionPolicy module), which a warm load otherwise never
	// touches.
	screened := false
	screen := func() error {
		if screened {
			return nil
		}
		screened = true
		e.screens.Add(1)
		return ScreenLimits(wasm, e.limits)
	}
	if !e.instrument || !e.loads.enabled() {
		if err := screen(); err != nil {
			return nil, err
		}
	}
	logger := e.logger.With("module", key.digest[:19])
	var dir string // the module's load-cache directory, if any
	newModule := func(wm wapc.Module, interrupt string, cache wazero.CompilationCache) *compiledModule {
		var size int64
		if s, ok := wm.(sizedModule); ok {
			wm, size = s.Module, s.codeBytes
		} else if dir != "" && cache != nil && cache != e.cache {
			size = compiledSize(dir) // a warm load from the load cache
		}
		return &compiledModule{
			codeBytes: size,
			wm:        wm.(*wapcwazero.Module),
			cache:     cache,
			digest:    key.digest,
			memCap:    key.memCap,
			exports:   exports,
			interrupt: interrupt,
		}
	}
	// uninstrumented compiles the module as given, bounded by wazero's
	// close-on-context-done, with the engine's compilation cache.
	uninstrumented := func() (*compiledModule, error) {
		if e.isolate {
			wm, cache, err := e.compileIsolated(ctx, wasm, "", "", nil, logger)
			if err != nil {
				return nil, err
			}
			return newModule(wm, "", cache), nil
		}
		wm, err := e.newWapcModule(e.compileContext(ctx), wasm, e.cache, "", logger)
		if err != nil {
			return nil, err
		}
		return newModule(wm, "", nil), nil
	}
	if !e.instrument {
		return uninstrumented()
	}

	// An instrumented module has its own compilation cache directory in the
	// load cache, and a stub there once it was loaded before: a warm load
	// compiles the stub from the cache only (see RATIONALE.md).
	var mcache wazero.CompilationCache
	if e.loads.enabled() {
		dir = e.loads.moduleDir(key.digest)
		err := os.MkdirAll(dir, 0o700)
		if err == nil {
			mcache, err = wazero.NewCompilationCacheWithDir(dir)
		}
		if err != nil {
			logger.Warn("load cache unusable; compiling without it", "dir", dir, "error", err)
			mcache = nil
		}
	}
	start := time.Now()
	if mcache == nil {
		if err := screen(); err != nil {
			return nil, err
		}
	}
	if mcache != nil {
		stub, err := getStub(dir)
		if err == nil && !screenedBy(dir, e.limits) {
			// Stored before markers, or by a build whose Screen was another.
			if err := screen(); err != nil {
				_ = mcache.Close(ctx)
				return nil, err
			}
			markScreened(dir, e.limits, logger)
		}
		if err == nil {
			wm, err := e.newWapcModule(cacheOnlyContext(ctx), stub, mcache, wasmbin.InterruptGlobal, logger)
			if err == nil {
				e.stubHits.Add(1)
				logger.Debug("module started from its stub in the load cache", "took", time.Since(start))
				return newModule(wm, wasmbin.InterruptGlobal, mcache), nil
			}
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				// The cache-only compile missed: the directory holds no code
				// compiled by this wazero build (a test binary's wazero is
				// "dev", a release's its version). An ordinary miss.
				logger.Debug("no compiled code for this wazero build in the load cache; compiling the module", "dir", dir)
			} else {
				logger.Info("starting the module from its cached stub failed; compiling it", "dir", dir, "error", err)
			}
			removeStub(dir)
		} else if !errors.Is(err, fs.ErrNotExist) {
			logger.Warn("load cache entry unusable; compiling the module", "error", err)
			removeStub(dir)
		}
	}

	if err := screen(); err != nil {
		if mcache != nil {
			_ = mcache.Close(ctx)
			removeEmptyDirs(dir)
		}
		return nil, err
	}
	if len(wasm) >= slowCompileBytes {
		// Seconds of silence otherwise (the MutatingAdmissionPolicy module: 11-20 s).
		logger.Info("compiling the module; this takes a while for its size", "bytes", len(wasm), "cached_for_next_load", mcache != nil)
	}
	// Bound the guest by an interrupt check compiled into the module when the
	// module can be instrumented; otherwise by wazero's close-on-context-done.
	e.instrumented.Add(1)
	code, err := instrumentedCode(wasm)
	if err != nil {
		logger.Debug("module not instrumented for interruption; using wazero's close-on-context-done", "error", err)
		if mcache != nil {
			_ = mcache.Close(ctx)
			removeEmptyDirs(dir) // nothing is cached for such a module
		}
		return uninstrumented()
	}
	if e.isolate {
		cdir := dir
		if mcache == nil {
			cdir = "" // the load cache is unusable: a temporary directory
		}
		wm, cache, err := e.compileIsolated(ctx, code, wasmbin.InterruptGlobal, cdir, mcache, logger)
		if err != nil {
			return nil, err
		}
		if cdir != "" {
			markScreened(cdir, e.limits, logger)
		}
		logger.Debug("module instrumented and compiled in a compiler process", "took", time.Since(start))
		return newModule(wm, wasmbin.InterruptGlobal, cache), nil
	}
	cache := e.cache
	if mcache != nil {
		cache = mcache
	}
	wm, err := e.newWapcModule(e.compileContext(ctx), code, cache, wasmbin.InterruptGlobal, logger)
	if err != nil && mcache != nil && ctx.Err() == nil {
		// wazero fails a compile whose cache entry is damaged (checksum)
		// rather than compiling again: start the module's directory afresh.
		// Not when the load was cancelled: that compile failed for that
		// reason, the next would too, and the directory may hold what
		// another process is storing.
		logger.Warn("compiling with the load cache failed; clearing the module's directory and compiling again", "dir", dir, "error", err)
		_ = mcache.Close(ctx)
		mcache, cache = nil, e.cache
		if os.RemoveAll(dir) == nil && os.MkdirAll(dir, 0o700) == nil {
			if c, cerr := wazero.NewCompilationCacheWithDir(dir); cerr == nil {
				mcache, cache = c, c
			}
		}
		wm, err = e.newWapcModule(e.compileContext(ctx), code, cache, wasmbin.InterruptGlobal, logger)
	}
	if err != nil {
		if mcache != nil {
			_ = mcache.Close(ctx)
			removeEmptyDirs(dir) // a module wazero refuses leaves nothing
		}
		return nil, err
	}
	compiled := time.Now()
	if mcache != nil {
		if err := e.storeStub(ctx, dir, code, logger); err != nil {
			logger.Warn("cannot store the module in the load cache; the next load compiles it again", "dir", dir, "error", err)
		} else {
			markScreened(dir, e.limits, logger)
		}
	}
	logger.Debug("module instrumented and compiled", "took", compiled.Sub(start), "cache_entry_took", time.Since(compiled))
	return newModule(wm, wasmbin.InterruptGlobal, mcache), nil
}

// compiledSize is the size of the largest compiled module in the wazero
// cache of dir (the module's machine code, as wazero stores it), or 0.
func compiledSize(dir string) int64 {
	var size int64
	subs, _ := os.ReadDir(dir)
	for _, s := range subs {
		if !s.IsDir() || !strings.HasPrefix(s.Name(), "wazero-") {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(dir, s.Name()))
		for _, f := range files {
			if fi, err := f.Info(); err == nil && isHex64(f.Name()) {
				size = max(size, fi.Size())
			}
		}
	}
	return size
}

// compileIsolated compiles code (instrumented with the interrupt global
// interrupt, or "" for wazero's close-on-context-done) in a compiler
// process (isolate.go) into the load-cache directory dir, whose cache
// mcache the caller opened, or into a temporary directory when dir is "",
// and loads it from there cache-only. The cache returned holds the
// compiled module (mcache, or the temporary directory's): close it with
// the module. On error, mcache is closed and dir left without a module.
func (e *Engine) compileIsolated(ctx context.Context, code []byte, interrupt, dir string, mcache wazero.CompilationCache, logger *slog.Logger) (wapc.Module, wazero.CompilationCache, error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tollgate-compile-")
		if err != nil {
			return nil, nil, fmt.Errorf("a directory for the compiler process: %w", err)
		}
		// The module is in memory once loaded: the files can go.
		defer os.RemoveAll(tmp)
		if mcache, err = wazero.NewCompilationCacheWithDir(tmp); err != nil {
			return nil, nil, fmt.Errorf("a directory for the compiler process: %w", err)
		}
		dir = tmp
	}
	fail := func(err error) (wapc.Module, wazero.CompilationCache, error) {
		_ = mcache.Close(ctx)
		removeStub(dir)
		removeEmptyDirs(dir)
		return nil, nil, err
	}
	b := compileBudget{timeout: e.compileTimeout, memory: e.compileMemory, workers: e.workers}
	err := compileInChild(ctx, code, dir, interrupt == "", b)
	if err != nil && !errors.Is(err, ErrCompileBudget) && ctx.Err() == nil && dir != "" {
		// wazero fails a compile whose cache entry is damaged (checksum)
		// rather than compiling again: start the module's directory afresh.
		logger.Warn("compiling into the load cache failed; clearing the module's directory and compiling again", "dir", dir, "error", err)
		_ = mcache.Close(ctx)
		if rerr := os.RemoveAll(dir); rerr != nil {
			return nil, nil, err
		}
		if rerr := os.MkdirAll(dir, 0o700); rerr != nil {
			return nil, nil, err
		}
		if mcache, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
			return nil, nil, err
		}
		err = compileInChild(ctx, code, dir, interrupt == "", b)
	}
	if err != nil {
		return fail(err)
	}
	stub, err := getStub(dir)
	if err != nil {
		return fail(fmt.Errorf("%w: the compiler process left no usable stub: %v", ErrCompile, err))
	}
	wm, err := e.newWapcModule(cacheOnlyContext(ctx), stub, mcache, interrupt, logger)
	if err != nil {
		return fail(fmt.Errorf("loading the module the compiler process compiled: %w", err))
	}
	return sizedModule{wm, compiledSize(dir)}, mcache, nil
}

// sizedModule is a wapc.Module with the size of its machine code.
type sizedModule struct {
	wapc.Module
	codeBytes int64
}

// instrumentedCode is the code an instrumented module runs (and the load
// cache holds): wasmbin.Instrument's, with its data segments merged
// (wasmbin.MergeData): a standard-Go module has tens of thousands, which
// wazero keeps decoded in the compiled module (35 MB of heap for the
// MutatingAdmissionPolicy module) and lists again in every instance (a
// slice entry each) and applies one by one at every instantiation.
func instrumentedCode(wasm []byte) ([]byte, error) {
	code, _, err := wasmbin.Instrument(wasm)
	if err != nil {
		return nil, err
	}
	if merged, ok, err := wasmbin.MergeData(code, mergeGap); err == nil && ok {
		return merged, nil
	}
	return code, nil
}

// mergeGap is the largest run of zeros MergeData writes between two merged
// data segments (host/wasi's value).
const mergeGap = 4096

// slowCompileBytes is the module size from which a compile is announced: a
// few MB compile in well under a second, tens of MB take seconds.
const slowCompileBytes = 8 << 20

// compileContext makes a cache miss compile the functions on e.workers
// goroutines (wazero reads the setting from the context of CompileModule).
func (e *Engine) compileContext(ctx context.Context) context.Context {
	return experimental.WithCompilationWorkers(ctx, e.workers)
}

// cacheOnlyContext makes CompileModule succeed only from the compilation
// cache: wazero's cache lookup ignores the context, while its parallel
// compiler (two workers or more) stops with the context's error before it
// compiles or caches anything. A stub must never be compiled for real:
// its functions only trap.
func cacheOnlyContext(ctx context.Context) context.Context {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	return experimental.WithCompilationWorkers(c, 2)
}

// storeStub leaves what the next load of an instrumented module needs in its
// load-cache directory dir, whose wazero cache now holds the compiled code:
// the compiled code under the stub's cache key too, then the stub. The
// stub's key is learnt by compiling the stub (cheap: every body is one
// instruction) into a throwaway cache.
func (e *Engine) storeStub(ctx context.Context, dir string, code []byte, logger *slog.Logger) error {
	return storeStubOf(ctx, e.workers, dir, code, func(ctx context.Context, stub []byte, cache wazero.CompilationCache) (struct{}, func(), error) {
		wm, err := e.newWapcModule(ctx, stub, cache, wasmbin.InterruptGlobal, logger)
		if err != nil {
			return struct{}{}, nil, fmt.Errorf("compiling the stub: %w", err)
		}
		return struct{}{}, func() { _ = wm.Close(ctx) }, nil
	})
}

// newWapcModule compiles a module through wapc-go on a runtime using cache.
func (e *Engine) newWapcModule(ctx context.Context, code []byte, cache wazero.CompilationCache, interrupt string, logger *slog.Logger) (wapc.Module, error) {
	wapcEngine := wapcwazero.EngineWithRuntime(func(ctx context.Context) (wazero.Runtime, error) {
		return e.newRuntime(ctx, cache, interrupt)
	})
	wm, err := wapcEngine.New(ctx, dispatchHostCall, code, &wapc.ModuleConfig{
		Logger: consoleLog(logger),
		Stdout: &lineLogger{logger: logger, stream: "stdout"},
		Stderr: &lineLogger{logger: logger, stream: "stderr"},
	})
	if err != nil {
		return nil, CompileError(code, err)
	}
	return wm, nil
}

// checkDigest validates a caller-provided ModuleConfig.Digest.
func checkDigest(d string) error {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || !isHex64(h) {
		return fmt.Errorf("module digest %q: want sha256:<64 lower-case hex digits>", d)
	}
	return nil
}

// newRuntime is the wapc-go runtime factory: a compiler runtime sharing the
// engine's compilation cache, with WASI (nothing mounted, proc_exit that does
// not close the instance) and start-function handling for commands and
// reactors. interrupt is the exported global of a module instrumented by
// wasmbin.Instrument, set when a call's context is done; when it is empty the
// runtime closes modules when their context is done instead.
func (e *Engine) newRuntime(ctx context.Context, cache wazero.CompilationCache, interrupt string) (wazero.Runtime, error) {
	// The host modules are instantiated whatever the context of the compile
	// (cacheOnlyContext is cancelled).
	ctx = context.WithoutCancel(ctx)
	rc := NewRuntimeConfig(cache).WithCloseOnContextDone(interrupt == "")
	r := wazero.NewRuntimeWithConfig(ctx, rc)

	b := r.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	// Replace proc_exit: wazero's closes the module, which would kill an
	// instance whose `_start` ends in proc_exit(0) (TinyGo -target=wasi, the way
	// Kubewarden builds policies). This one only unwinds the call.
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(procExit), []api.ValueType{api.ValueTypeI32}, nil).
		WithParameterNames("rval").
		Export("proc_exit")
	if _, err := b.Instantiate(ctx); err != nil {
		_ = r.Close(ctx)
		return nil, err
	}
	// AssemblyScript's abort, as wapc-go's default runtime provides it.
	env := r.NewHostModuleBuilder("env")
	env.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {
			panic(sys.NewExitError(255))
		}), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).
		Export("abort")
	if _, err := env.Instantiate(ctx); err != nil {
		_ = r.Close(ctx)
		return nil, err
	}
	return &startingRuntime{Runtime: r, interrupt: interrupt}, nil
}

func procExit(_ context.Context, _ api.Module, params []uint64) {
	panic(sys.NewExitError(uint32(params[0])))
}

// startingRuntime runs a module's start functions itself when wapc-go
// instantiates it: the function of the start section of an instrumented
// module (which wasmbin.Instrument exports as wasmbin.StartExport instead,
// so that it runs interruptible), `_initialize` for reactors, then `_start`
// for commands,
// accepting a `_start` that ends in proc_exit(0). The module it returns hides
// both functions so that wapc-go does not run them a second time.
//
// For an instrumented module (interrupt set) every function it hands out,
// start functions included, sets the interrupt global when the context of
// the call is done.
type startingRuntime struct {
	wazero.Runtime
	interrupt string
}

func (r *startingRuntime) InstantiateModule(ctx context.Context, c wazero.CompiledModule, cfg wazero.ModuleConfig) (api.Module, error) {
	calls := &callContext{}
	// wapc-go's configuration sleeps with WithSysNanosleep, which nothing
	// interrupts: a guest sleeping past its deadline held its worker.
	raw, err := r.Runtime.InstantiateModule(ctx, c, cfg.WithStartFunctions().WithNanosleep(calls.sleep))
	if err != nil {
		return nil, err
	}
	mod := startedModule{Module: raw, calls: calls}
	if r.interrupt != "" {
		g, ok := raw.ExportedGlobal(r.interrupt).(api.MutableGlobal)
		if !ok {
			_ = raw.Close(ctx)
			return nil, fmt.Errorf("the instrumented module does not export the mutable global %s", r.interrupt)
		}
		mod.interrupt = g
	}
	// The instrumented module's start function (wasmbin.StartExport), then
	// the WASI reactor's and command's.
	for _, name := range []string{wasmbin.StartExport, "_initialize", "_start"} {
		if name == wasmbin.StartExport && r.interrupt == "" {
			continue // an uninstrumented module ran its start section in wazero
		}
		f := mod.exportedFunction(name)
		if f == nil {
			continue
		}
		if _, err := f.Call(ctx); err != nil {
			var exit *sys.ExitError
			if errors.As(err, &exit) && exit.ExitCode() == 0 {
				continue
			}
			_ = mod.Close(ctx)
			if name == wasmbin.StartExport {
				name = "the start function"
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return mod, nil
}

// startedModule hides the start functions, and makes the functions of an
// instrumented module interruptible.
type startedModule struct {
	api.Module
	interrupt api.MutableGlobal // nil when the module is not instrumented
	calls     *callContext
}

// callContext is the context of the call an instance is running (a waPC
// instance runs one call at a time), for its nanosleep.
type callContext struct {
	ctx atomic.Pointer[context.Context]
}

// sleep is the guest's nanosleep (WASI poll_oneoff's clock, where a TinyGo
// time.Sleep ends): it returns after ns or when the running call's context
// is done, whichever comes first; the deadline's interrupt (or
// close-on-context-done) then stops the guest.
func (c *callContext) sleep(ns int64) {
	if ns <= 0 {
		return
	}
	var done <-chan struct{}
	if ctx := c.ctx.Load(); ctx != nil {
		done = (*ctx).Done()
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// during makes ctx the running call's context until the returned func.
func (c *callContext) during(ctx context.Context) func() {
	c.ctx.Store(&ctx)
	return func() { c.ctx.Store(nil) }
}

func (m startedModule) ExportedFunction(name string) api.Function {
	if name == "_start" || name == "_initialize" || name == wasmbin.StartExport {
		return nil
	}
	return m.exportedFunction(name)
}

func (m startedModule) exportedFunction(name string) api.Function {
	f := m.Module.ExportedFunction(name)
	if f == nil {
		return f
	}
	return interruptibleFunction{Function: f, interrupt: m.interrupt, calls: m.calls}
}

// interruptibleFunction is a function of an instrumented module: while a call
// runs, the end of its context sets the module's interrupt global, so that
// the guest traps (`unreachable`) within wasmbin.CheckInterval function
// entries or loop iterations. The global is never reset: an interrupted
// instance is discarded.
//
// Every function handed out (instrumented or not) also makes its call's
// context the one the instance's sleeps end with.
type interruptibleFunction struct {
	api.Function
	interrupt api.MutableGlobal // nil: not instrumented
	calls     *callContext
}

func (f interruptibleFunction) Call(ctx context.Context, params ...uint64) ([]uint64, error) {
	defer f.calls.during(ctx)()
	if f.interrupt != nil {
		stop := context.AfterFunc(ctx, f.set)
		defer stop()
	}
	return f.Function.Call(ctx, params...)
}

func (f interruptibleFunction) CallWithStack(ctx context.Context, stack []uint64) error {
	defer f.calls.during(ctx)()
	if f.interrupt != nil {
		stop := context.AfterFunc(ctx, f.set)
		defer stop()
	}
	return f.Function.CallWithStack(ctx, stack)
}

func (f interruptibleFunction) set() { f.interrupt.Set(1) }

// lineLogger turns guest stdout/stderr into log lines.
type lineLogger struct {
	logger *slog.Logger
	stream string
	mu     sync.Mutex
	buf    []byte
}

var _ io.Writer = (*lineLogger)(nil)

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := indexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.logger.Debug("guest output", "stream", l.stream, "line", outputLine(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 4096 {
		l.logger.Debug("guest output", "stream", l.stream, "line", outputLine(l.buf))
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

// outputLine is a line of guest output as logged: at most 4 KiB.
func outputLine(b []byte) string {
	s, _ := Cut(string(b[:min(len(b), 4097)]), 4096)
	return s
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
