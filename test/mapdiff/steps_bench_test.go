package mapdiff_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// BenchmarkMAPSteps prints the per-step profile of the label evaluation in
// the module (docs/benchmarks/mutating-admission-policy.md): the TinyGo guest
// built as a WASI command with -tags=mapsteps (policies/mutating-admission-policy/tinygo/steps_on.go),
// named by TOLLGATE_MAP_STEPS_MODULE, run on plain wazero with the repository
// mounted at / and the waPC imports answered by stubs (it makes no host
// call). Skipped without the variable: the shipped module has no steps.
//
//	scripts/build-map-tinygo.sh -o /tmp/map-steps.wasm policies/mutating-admission-policy/tinygo -- \
//	    -target=./wasip1-map.json -tags=mapsteps -scheduler=none -no-debug
//	TOLLGATE_MAP_STEPS_MODULE=/tmp/map-steps.wasm go test -run '^$' -bench MAPSteps -benchtime 1x ./test/mapdiff
func BenchmarkMAPSteps(b *testing.B) {
	path := os.Getenv("TOLLGATE_MAP_STEPS_MODULE")
	if path == "" {
		b.Skip("TOLLGATE_MAP_STEPS_MODULE names no module built with -tags=mapsteps")
	}
	module, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		r := wazero.NewRuntime(ctx)
		wasi_snapshot_preview1.MustInstantiate(ctx, r)
		cm, err := r.CompileModule(ctx, module)
		if err != nil {
			b.Fatal(err)
		}
		hb := r.NewHostModuleBuilder("wapc")
		for _, f := range cm.ImportedFunctions() {
			if mod, name, _ := f.Import(); mod == "wapc" {
				results := f.ResultTypes()
				hb.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
					for i := range results {
						stack[i] = 0
					}
				}), f.ParamTypes(), results).Export(name)
			}
		}
		if _, err := hb.Instantiate(ctx); err != nil {
			b.Fatal(err)
		}
		cfg := wazero.NewModuleConfig().WithStdout(os.Stdout).WithStderr(os.Stderr).WithSysWalltime().WithSysNanotime().
			WithFSConfig(wazero.NewFSConfig().WithDirMount(root, "/"))
		if _, err := r.InstantiateModule(ctx, cm, cfg); err != nil {
			b.Fatal(err) // the steps' error, or exit code 1
		}
		r.Close(ctx)
	}
}
