package wasm

import (
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestLoadCacheWasmOptModule: a module optimized by binaryen 116 (typed
// function references: call_ref, ref.func, typed locals) is instrumented,
// stored in the load cache and started from its stub by the next engine.
func TestLoadCacheWasmOptModule(t *testing.T) {
	mod := testfixture.File(t, "examples/go-image-registries/policy.opt.wasm")
	dir := t.TempDir()
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 1 || hits != 0 {
		t.Fatalf("first load: %d instrumentations, %d stub loads; want 1, 0", n, hits)
	}
	wantLoadCache(t, dir, mod)
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 0 || hits != 1 {
		t.Fatalf("second load: %d instrumentations, %d stub loads; want 0, 1", n, hits)
	}
}
