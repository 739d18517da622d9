package wasm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// keyedLoadCacheDir holds the load-cache entries of LoadCached, one
// directory per key, laid out as those of Engine.Compile (loadcache.go).
const keyedLoadCacheDir = "tollgate-load-v1-keyed"

// CompileFunc compiles code on a wazero runtime that uses cache and must
// compile exactly code with ctx (rt.CompileModule(ctx, code)): ctx carries
// the compilation workers and, for a stub, the cancellation that keeps the
// compile to the cache. It returns what the caller keeps (a runtime and its
// compiled module) and a function that releases it.
type CompileFunc[T any] func(ctx context.Context, code []byte, cache wazero.CompilationCache) (T, func(), error)

// LoadCached compiles a module that is not run through waPC (a WASI command)
// with the engine's load cache, as Engine.Compile does an instrumented waPC
// module (RATIONALE.md, "Why does a warm load compile a stub?"): the entry
// of key (a name for what code is, such as "wasi-v1-<sha256 hex of the
// module as given>") holds its own wazero cache with code's machine code and
// the stub of code; a warm load compiles the stub from that cache only,
// which skips decoding and validating code's function bodies. makeCode
// makes code (the module as it runs: a WASI command with its data segments
// merged); a warm load does not call it. The
// CompilationCache returned is the entry's, to close once the result is
// released (nil when the engine has no cache directory and compiled with
// its shared cache); stubbed says the warm path was taken. Any problem with
// the entry falls back to compiling code, which repairs the entry.
//
// closeOnDone is the close-on-context-done setting of compile's runtime
// (part of wazero's cache key): unless the engine compiles in process
// (Config.CompileInProcess), code is compiled by a compiler process with
// the engine's budget (isolate.go), into the entry or a temporary
// directory, and compile only ever compiles stubs, from the cache.
func LoadCached[T any](ctx context.Context, e *Engine, key string, closeOnDone bool, makeCode func() ([]byte, error), compile CompileFunc[T]) (v T, cache wazero.CompilationCache, stubbed bool, err error) {
	var code []byte
	// direct compiles code (made first when nil) with the engine's shared
	// cache, without the load cache (with a temporary one in a compiler
	// process).
	direct := func() (T, wazero.CompilationCache, bool, error) {
		if code == nil {
			if code, err = makeCode(); err != nil {
				return v, nil, false, err
			}
		}
		if e.isolate {
			tmp, err := os.MkdirTemp("", "tollgate-compile-")
			if err != nil {
				return v, nil, false, fmt.Errorf("a directory for the compiler process: %w", err)
			}
			defer os.RemoveAll(tmp)
			tcache, err := wazero.NewCompilationCacheWithDir(tmp)
			if err != nil {
				return v, nil, false, fmt.Errorf("a directory for the compiler process: %w", err)
			}
			v, err = loadIsolated(ctx, e, code, tmp, tcache, closeOnDone, compile)
			if err != nil {
				_ = tcache.Close(ctx)
				return v, nil, false, err
			}
			return v, tcache, false, nil
		}
		v, _, err = compile(e.compileContext(ctx), code, e.cache)
		return v, nil, false, err
	}
	if e.dir == "" || e.loads.root == "" || strings.ContainsAny(key, `/\`) || key == "" {
		return direct()
	}
	logger := e.logger.With("module", key)
	dir := filepath.Join(e.dir, keyedLoadCacheDir, key)
	mcache, err := wazero.CompilationCache(nil), os.MkdirAll(dir, 0o700)
	if err == nil {
		mcache, err = wazero.NewCompilationCacheWithDir(dir)
	}
	if err != nil {
		logger.Warn("load cache unusable; compiling without it", "dir", dir, "error", err)
		return direct()
	}
	if stub, serr := getStub(dir); serr == nil {
		v, _, err := compile(cacheOnlyContext(ctx), stub, mcache)
		if err == nil {
			e.stubHits.Add(1)
			return v, mcache, true, nil
		}
		logger.Debug("starting the module from its cached stub failed; compiling it", "dir", dir, "error", err)
		removeStub(dir)
	} else if !errors.Is(serr, fs.ErrNotExist) {
		logger.Warn("load cache entry unusable; compiling the module", "error", serr)
		removeStub(dir)
	}
	if code, err = makeCode(); err != nil {
		_ = mcache.Close(ctx)
		return v, nil, false, err
	}
	if len(code) >= slowCompileBytes {
		logger.Info("compiling the module; this takes a while for its size", "bytes", len(code), "cached_for_next_load", true)
	}
	if e.isolate {
		v, err = loadIsolated(ctx, e, code, dir, mcache, closeOnDone, compile)
		if err != nil && !errors.Is(err, ErrCompileBudget) && ctx.Err() == nil {
			// A damaged entry: start the directory afresh and compile again.
			_ = mcache.Close(ctx)
			if os.RemoveAll(dir) != nil || os.MkdirAll(dir, 0o700) != nil {
				return v, nil, false, err
			}
			if mcache, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
				return v, nil, false, err
			}
			v, err = loadIsolated(ctx, e, code, dir, mcache, closeOnDone, compile)
		}
		if err != nil {
			_ = mcache.Close(ctx)
			removeStub(dir)
			removeEmptyDirs(dir)
			return v, nil, false, err
		}
		return v, mcache, false, nil
	}
	v, _, err = compile(e.compileContext(ctx), code, mcache)
	if err != nil && ctx.Err() == nil {
		// A damaged entry (wazero fails a compile whose cached code fails its
		// checksum): start the directory afresh and compile again.
		_ = mcache.Close(ctx)
		if os.RemoveAll(dir) != nil || os.MkdirAll(dir, 0o700) != nil {
			return direct()
		}
		if mcache, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
			return direct()
		}
		v, _, err = compile(e.compileContext(ctx), code, mcache)
	}
	if err != nil {
		_ = mcache.Close(ctx)
		removeEmptyDirs(dir)
		return v, nil, false, err
	}
	if err := storeStubOf(ctx, e.workers, dir, code, compile); err != nil {
		logger.Warn("cannot store the module in the load cache; the next load compiles it again", "dir", dir, "error", err)
	}
	return v, mcache, false, nil
}

// storeStubOf is storeStub for a module compiled by compile.
func storeStubOf[T any](ctx context.Context, workers int, dir string, code []byte, compile CompileFunc[T]) error {
	stub, err := wasmbin.Stub(code)
	if err != nil {
		return err
	}
	probeDir, err := os.MkdirTemp(dir, ".probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(probeDir)
	probe, err := wazero.NewCompilationCacheWithDir(probeDir)
	if err != nil {
		return err
	}
	defer probe.Close(ctx)
	_, release, err := compile(experimental.WithCompilationWorkers(ctx, workers), stub, probe)
	if err != nil {
		return err
	}
	release()
	entry, err := onlyCacheEntry(probeDir)
	if err != nil {
		return err
	}
	if err := linkCompiled(dir, entry); err != nil {
		return err
	}
	return putStub(dir, stub)
}

// loadIsolated compiles code in a compiler process into dir, whose cache
// mcache is open, then compiles code's stub from that cache only with compile.
func loadIsolated[T any](ctx context.Context, e *Engine, code []byte, dir string, mcache wazero.CompilationCache, closeOnDone bool, compile CompileFunc[T]) (T, error) {
	var v T
	b := compileBudget{timeout: e.compileTimeout, memory: e.compileMemory, workers: e.workers}
	if err := compileInChild(ctx, code, dir, closeOnDone, b); err != nil {
		return v, err
	}
	stub, err := getStub(dir)
	if err != nil {
		return v, fmt.Errorf("%w: the compiler process left no usable stub: %v", ErrCompile, err)
	}
	v, _, err = compile(cacheOnlyContext(ctx), stub, mcache)
	if err != nil {
		return v, fmt.Errorf("loading the module the compiler process compiled: %w", err)
	}
	return v, nil
}
