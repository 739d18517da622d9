package enginecmp

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
	"github.com/wapc/wapc-go"
	wapcwazero "github.com/wapc/wapc-go/engines/wazero"
)

// hostCall answers every waPC host call of every engine the same way: with
// success and an empty answer (the modules compared only log, if anything).
func hostCall(context.Context, string, string, string, []byte) ([]byte, error) {
	return nil, nil
}

// wazeroRunner is plain wazero through wapc-go: the compiler with its default
// configuration (no close-on-context-done), and only what the modules need to
// run at all, which wapc-go's default runtime lacks: a proc_exit that does not
// close the instance (TinyGo `-target=wasi` modules end `_start` with
// proc_exit(0)) and `_initialize` for standard-Go reactors.
type wazeroRunner struct {
	cache wazero.CompilationCache
	mod   wapc.Module
	inst  wapc.Instance
}

func newWazero(ctx context.Context, m *Loaded, dir string) (Runner, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, err
	}
	r := &wazeroRunner{cache: cache}
	engine := wapcwazero.EngineWithRuntime(func(ctx context.Context) (wazero.Runtime, error) {
		return plainRuntime(ctx, cache)
	})
	r.mod, err = engine.New(ctx, hostCall, m.Wasm, &wapc.ModuleConfig{Logger: func(string) {}})
	if err != nil {
		r.Close()
		return nil, err
	}
	r.inst, err = r.mod.Instantiate(ctx)
	if err != nil {
		r.Close()
		return nil, err
	}
	if _, err := r.inst.Invoke(ctx, "validate_settings", m.Settings); err != nil {
		r.Close()
		return nil, fmt.Errorf("validate_settings: %w", err)
	}
	return r, nil
}

func (r *wazeroRunner) Validate(ctx context.Context, req *Request) (Answer, error) {
	out, err := r.inst.Invoke(ctx, "validate", req.Payload)
	if err != nil {
		return Answer{}, err
	}
	return Answer{Raw: append([]byte(nil), out...)}, nil
}

func (r *wazeroRunner) Close() {
	ctx := context.Background()
	if r.inst != nil {
		_ = r.inst.Close(ctx)
	}
	if r.mod != nil {
		_ = r.mod.Close(ctx)
	}
	_ = r.cache.Close(ctx)
}

// plainRuntime is a compiler runtime with WASI whose proc_exit unwinds the
// call without closing the module.
func plainRuntime(ctx context.Context, cache wazero.CompilationCache) (wazero.Runtime, error) {
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache))
	b := r.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, params []uint64) {
			panic(sys.NewExitError(uint32(params[0])))
		}), []api.ValueType{api.ValueTypeI32}, nil).
		Export("proc_exit")
	if _, err := b.Instantiate(ctx); err != nil {
		_ = r.Close(ctx)
		return nil, err
	}
	return &startRuntime{Runtime: r}, nil
}

// startRuntime calls `_initialize` and `_start` itself (accepting an exit
// with code 0) and hides them from wapc-go, which would call `_start` again
// and fail on its exit.
type startRuntime struct{ wazero.Runtime }

func (r *startRuntime) InstantiateModule(ctx context.Context, c wazero.CompiledModule, cfg wazero.ModuleConfig) (api.Module, error) {
	mod, err := r.Runtime.InstantiateModule(ctx, c, cfg.WithStartFunctions())
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"_initialize", "_start"} {
		f := mod.ExportedFunction(name)
		if f == nil {
			continue
		}
		if _, err := f.Call(ctx); err != nil {
			var exit *sys.ExitError
			if errors.As(err, &exit) && exit.ExitCode() == 0 {
				continue
			}
			_ = mod.Close(ctx)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return startedModule{mod}, nil
}

type startedModule struct{ api.Module }

func (m startedModule) ExportedFunction(name string) api.Function {
	if name == "_start" || name == "_initialize" {
		return nil
	}
	return m.Module.ExportedFunction(name)
}
