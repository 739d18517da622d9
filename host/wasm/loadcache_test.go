package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// compileAndCall compiles mod with a fresh engine on cfg, checks that the
// module is interruptible and answers a call, and returns the engine's
// counters: Instrument runs and loads from a stub.
func compileAndCall(t *testing.T, cfg Config, mod []byte, mc ModuleConfig) (instrumented, hits int64) {
	t.Helper()
	ctx := context.Background()
	e, err := NewEngine(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Compile(ctx, mod, mc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if !m.Interruptible() {
		t.Fatal("the module is not instrumented")
	}
	if m.Digest() != Digest(mod) {
		t.Fatalf("digest %s, want %s", m.Digest(), Digest(mod))
	}
	// The instance starts (`_start`/`_initialize` run) and answers: a stub
	// compiled for real would trap in both.
	p, err := m.NewPool(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	out, err := p.Call(ctx, 10*time.Second, "validate_settings", []byte(`{}`))
	if err != nil {
		t.Fatalf("validate_settings: %v", err)
	}
	if !bytes.Contains(out, []byte(`"valid"`)) {
		t.Fatalf("validate_settings answered %q", out)
	}
	return e.instrumented.Load(), e.stubHits.Load()
}

func moduleDir(t *testing.T, cacheDir string, mod []byte) string {
	t.Helper()
	return newLoadCache(cacheDir).moduleDir(Digest(mod))
}

// compiledEntries lists the wazero cache entries of a module directory.
func compiledEntries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wazero-*", strings.Repeat("[0-9a-f]", 64)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wantLoadCache checks the module's load-cache directory: the stub of the
// instrumented module, and its compiled code under two keys.
func wantLoadCache(t *testing.T, cacheDir string, mod []byte) {
	t.Helper()
	dir := moduleDir(t, cacheDir, mod)
	inst, err := instrumentedCode(mod)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wasmbin.Stub(inst)
	if err != nil {
		t.Fatal(err)
	}
	got, err := getStub(dir)
	if err != nil {
		t.Fatalf("no usable stub: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the stub file holds %d bytes that differ from Stub(Instrument(module))'s %d", len(got), len(want))
	}
	entries := compiledEntries(t, dir)
	if len(entries) != 2 {
		t.Fatalf("compiled entries %v, want the module's and the stub's", entries)
	}
	a, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(entries[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the stub's key does not hold the module's compiled code")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".probe-*")); len(left) != 0 {
		t.Fatalf("probe directories left behind: %v", left)
	}
}

func TestLoadCacheHit(t *testing.T) {
	// The binaryen 116 build of the waPC example (wasm-opt --all-features
	// -Oz: typed function references) goes the same way.
	opt := testfixture.File(t, "examples/go-image-registries/policy.opt.wasm")
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	for _, m := range [][]byte{opt, mod} {
		if n, hits := compileAndCall(t, Config{CacheDir: dir}, m, ModuleConfig{}); n != 1 || hits != 0 {
			t.Fatalf("first load: %d instrumentations, %d stub loads; want 1, 0", n, hits)
		}
		wantLoadCache(t, dir, m)
		// A new engine (a restarted process) starts the module from the stub.
		if n, hits := compileAndCall(t, Config{CacheDir: dir}, m, ModuleConfig{}); n != 0 || hits != 1 {
			t.Fatalf("second load: %d instrumentations, %d stub loads; want 0, 1", n, hits)
		}
	}
	// So does one given the digest by its caller.
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{Digest: Digest(mod)}); n != 0 || hits != 1 {
		t.Fatalf("load with a known digest: %d instrumentations, %d stub loads; want 0, 1", n, hits)
	}
	wantLoadCache(t, dir, mod)
	// Without instrumentation the load cache is not used.
	ctx := context.Background()
	e, err := NewEngine(ctx, Config{CacheDir: dir, DisableInstrumentation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Compile(ctx, mod, ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if m.Interruptible() || e.stubHits.Load() != 0 || e.instrumented.Load() != 0 {
		t.Fatalf("DisableInstrumentation: interruptible %v, %d stub loads, %d instrumentations", m.Interruptible(), e.stubHits.Load(), e.instrumented.Load())
	}
}

// TestCacheOnlyCompile pins the wazero behaviour the stub relies on: with
// cacheOnlyContext, CompileModule of a module missing from the cache fails
// and caches nothing, and it succeeds from the cache.
func TestCacheOnlyCompile(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	ctx := context.Background()
	dir := t.TempDir()
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close(ctx)
	compile := func(ctx context.Context) error {
		r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache))
		defer r.Close(ctx)
		_, err := r.CompileModule(ctx, mod)
		return err
	}
	if err := compile(cacheOnlyContext(ctx)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cache-only compile of a module not in the cache: %v, want context.Canceled", err)
	}
	if e := compiledEntries(t, dir); len(e) != 0 {
		t.Fatalf("the failed cache-only compile cached %v", e)
	}
	if err := compile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := compile(cacheOnlyContext(ctx)); err != nil {
		t.Fatalf("cache-only compile of a cached module: %v", err)
	}
}

func TestLoadCacheDamaged(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{})
	mdir := moduleDir(t, dir, mod)
	stubPath := filepath.Join(mdir, stubFileName)
	goodStub, err := os.ReadFile(stubPath)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) func() error {
		return func() error {
			b := bytes.Clone(goodStub)
			b[i] ^= 0x40
			return os.WriteFile(stubPath, b, 0o600)
		}
	}
	write := func(b []byte) func() error { return func() error { return os.WriteFile(stubPath, b, 0o600) } }
	for _, tc := range []struct {
		name   string
		damage func() error
	}{
		{"empty stub", write(nil)},
		{"truncated stub", write(goodStub[:len(goodStub)-100])},
		{"stub header only", write(goodStub[:stubHeaderLen])},
		{"stub magic", flip(0)},
		{"stub length", flip(len(stubMagic) + 4)},
		{"stub byte flipped", flip(stubHeaderLen + (len(goodStub)-stubHeaderLen)/2)},
		{"stub last byte flipped", flip(len(goodStub) - 1)},
		{"stub not wasm with a good checksum", func() error { return putStub(mdir, []byte("definitely not wasm")) }},
		// The stub is intact but its compiled code is gone: the cache-only
		// compile must fail rather than compile the stub.
		{"compiled code removed", func() error {
			for _, e := range compiledEntries(t, mdir) {
				if err := os.Remove(e); err != nil {
					return err
				}
			}
			return nil
		}},
		// wazero refuses a cache entry whose checksum fails, for the stub
		// and for the module (the same file, hard-linked).
		{"compiled code damaged", func() error {
			entries := compiledEntries(t, mdir)
			if len(entries) == 0 {
				return errors.New("no compiled entries")
			}
			b, err := os.ReadFile(entries[0])
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			for _, e := range entries {
				if err := os.WriteFile(e, b, 0o600); err != nil {
					return err
				}
			}
			return nil
		}},
		{"stub key removed", func() error {
			entries := compiledEntries(t, mdir)
			stubEntry, err := onlyCacheEntryOfStub(t, mdir)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if e == stubEntry {
					return os.Remove(e)
				}
			}
			return errors.New("no stub entry")
		}},
		{"wazero directory replaced by a file", func() error {
			for _, e := range compiledEntries(t, mdir) {
				if err := os.RemoveAll(filepath.Dir(e)); err != nil {
					return err
				}
				return os.WriteFile(filepath.Dir(e), []byte("x"), 0o600)
			}
			return errors.New("no compiled entries")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.damage(); err != nil {
				t.Fatal(err)
			}
			n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{})
			if n != 1 || hits != 0 {
				t.Fatalf("%d instrumentations, %d stub loads; want 1, 0", n, hits)
			}
			if tc.name == "wazero directory replaced by a file" {
				// Nothing can be cached; the next test needs a clean directory.
				if err := os.RemoveAll(mdir); err != nil {
					t.Fatal(err)
				}
				compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{})
			}
			wantLoadCache(t, dir, mod) // repaired
			if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 0 || hits != 1 {
				t.Fatalf("after the repair: %d instrumentations, %d stub loads; want 0, 1", n, hits)
			}
			var err error
			if goodStub, err = os.ReadFile(stubPath); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// onlyCacheEntryOfStub finds the stub's entry among a module directory's
// compiled entries by compiling the stub into a scratch cache.
func onlyCacheEntryOfStub(t *testing.T, mdir string) (string, error) {
	stub, err := getStub(mdir)
	if err != nil {
		return "", err
	}
	scratch := t.TempDir()
	ctx := context.Background()
	e, err := NewEngine(ctx, Config{DisableCache: true})
	if err != nil {
		return "", err
	}
	defer e.Close(ctx)
	cache, err := wazero.NewCompilationCacheWithDir(scratch)
	if err != nil {
		return "", err
	}
	defer cache.Close(ctx)
	wm, err := e.newWapcModule(ctx, stub, cache, wasmbin.InterruptGlobal, e.logger)
	if err != nil {
		return "", err
	}
	_ = wm.Close(ctx)
	rel, err := onlyCacheEntry(scratch)
	if err != nil {
		return "", err
	}
	return filepath.Join(mdir, rel), nil
}

func TestLoadCacheDisabled(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		if n, hits := compileAndCall(t, Config{CacheDir: dir, DisableCache: true}, mod, ModuleConfig{}); n != 1 || hits != 0 {
			t.Fatalf("load %d: %d instrumentations, %d stub loads; want 1, 0", i, n, hits)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("DisableCache wrote %d entries into the cache directory (%s...)", len(entries), entries[0].Name())
	}
}

func TestLoadCacheUnwritable(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	// A file where the load cache should be: nothing can be stored, and
	// loading works anyway.
	if err := os.WriteFile(filepath.Join(dir, loadCacheDirName()), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 1 || hits != 0 {
			t.Fatalf("load %d: %d instrumentations, %d stub loads; want 1, 0", i, n, hits)
		}
	}
}

func TestModuleConfigDigest(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	ctx := context.Background()
	e, err := NewEngine(ctx, Config{DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	for _, d := range []string{"sha256:abc", "md5:" + strings.Repeat("0", 64), strings.TrimPrefix(Digest(mod), "sha256:"), "sha256:" + strings.Repeat("G", 64), strings.ToUpper(Digest(mod))} {
		if m, err := e.Compile(ctx, mod, ModuleConfig{Digest: d}); err == nil {
			m.Release()
			t.Errorf("digest %q accepted", d)
		} else if !strings.Contains(err.Error(), d) {
			t.Errorf("digest %q: the error does not name it: %v", d, err)
		}
	}
	m, err := e.Compile(ctx, mod, ModuleConfig{Digest: Digest(mod)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	m2, err := e.Compile(ctx, mod, ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Release()
	if m.compiledModule != m2.compiledModule || e.Modules() != 1 {
		t.Fatalf("a given digest and a computed one did not share the module (%d modules)", e.Modules())
	}
}

// TestLoadCacheConcurrentLoads loads one module cold from several engines at
// once (as several processes sharing a cache directory would): every load
// works and the entry they leave is complete.
func TestLoadCacheConcurrentLoads(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	ctx := context.Background()
	errs := make(chan error, 4)
	for i := 0; i < cap(errs); i++ {
		go func() {
			e, err := NewEngine(ctx, Config{CacheDir: dir})
			if err != nil {
				errs <- err
				return
			}
			defer e.Close(ctx)
			m, err := e.Compile(ctx, mod, ModuleConfig{})
			if err != nil {
				errs <- err
				return
			}
			defer m.Release()
			p, err := m.NewPool(ctx, 1)
			if err != nil {
				errs <- err
				return
			}
			defer p.Close(ctx)
			_, err = p.Call(ctx, 10*time.Second, "validate_settings", []byte(`{}`))
			errs <- err
		}()
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wantLoadCache(t, dir, mod)
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 0 || hits != 1 {
		t.Fatalf("after concurrent cold loads: %d instrumentations, %d stub loads; want 0, 1", n, hits)
	}
}

// A load cancelled while it compiles fails without touching the module's
// directory: the compile failed because of the context, not because of a
// damaged entry, and the directory may hold what another process is storing.
func TestLoadCacheCancelledLoad(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	other := filepath.Join(moduleDir(t, dir, mod), ".probe-of-another-process")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Two workers: wazero's parallel compiler stops on the cancelled context.
	e, err := NewEngine(ctx, Config{CacheDir: dir, CompilationWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if m, err := e.Compile(cancelled, mod, ModuleConfig{}); err == nil {
		m.Release()
		t.Fatal("a cold load with a cancelled context succeeded")
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("the cancelled load cleared the module's directory: %v", err)
	}
}

// A second load linking the stub's key to the same compiled file leaves no
// temporary link behind (rename(2) of one link onto another of the same
// file succeeds and keeps both).
func TestLinkCompiledTwiceLeavesNoTemporaryLink(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "wazero-v0-test")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	real, stub := strings.Repeat("a", 64), strings.Repeat("b", 64)
	if err := os.WriteFile(filepath.Join(sub, real), []byte("compiled"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := linkCompiled(dir, filepath.Join("wazero-v0-test", stub)); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
	}
	entries, err := os.ReadDir(sub)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 {
		t.Fatalf("want the compiled entry and the stub's link, got %v", names)
	}
	if b, err := os.ReadFile(filepath.Join(sub, stub)); err != nil || string(b) != "compiled" {
		t.Fatalf("stub's link: %q, %v", b, err)
	}
}

// TestWarmLoadSkipsScreen: a module started from its stub is not screened
// again (Screen reads every function body: 41 MB of the MAP module's pages
// that a warm load otherwise leaves untouched) when its entry is marked as
// screened by this ScreenVersion; an entry without the mark (written before
// marks, or by a build with another ScreenVersion) is screened once, then
// marked.
func TestWarmLoadSkipsScreen(t *testing.T) {
	ctx := context.Background()
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	load := func() (screens, hits int64) {
		t.Helper()
		e, err := NewEngine(ctx, Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		m, err := e.Compile(ctx, mod, ModuleConfig{})
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
		return e.screens.Load(), e.stubHits.Load()
	}
	if s, h := load(); s != 1 || h != 0 {
		t.Fatalf("cold load: %d screens, %d stub loads; want 1, 0", s, h)
	}
	marker := filepath.Join(moduleDir(t, dir, mod), screenedName(Limits{}))
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no screened mark after a cold load: %v", err)
	}
	if s, h := load(); s != 0 || h != 1 {
		t.Fatalf("warm load: %d screens, %d stub loads; want 0, 1", s, h)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if s, h := load(); s != 1 || h != 1 {
		t.Fatalf("warm load without the mark: %d screens, %d stub loads; want 1, 1", s, h)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the unmarked entry was not marked after its screen: %v", err)
	}
}

// TestInstrumentedCodeMergesData: the code of an instrumented standard-Go
// module has its tens of thousands of data segments merged into a few, and
// still starts and answers (compileAndCall).
func TestInstrumentedCodeMergesData(t *testing.T) {
	mod := testfixture.Module(t, "examples/go-image-registries")
	segments := func(b []byte) uint64 {
		t.Helper()
		secs, err := wasmbin.Sections(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secs {
			if s.ID == 11 {
				n, _ := binary.Uvarint(s.Payload) // LEB128 u32: the same encoding
				return n
			}
		}
		return 0
	}
	inst, _, err := wasmbin.Instrument(mod)
	if err != nil {
		t.Fatal(err)
	}
	code, err := instrumentedCode(mod)
	if err != nil {
		t.Fatal(err)
	}
	before, after := segments(inst), segments(code)
	if before < 1000 || after*100 > before {
		t.Fatalf("data segments: %d instrumented, %d in the code run; want the thousands merged into a few", before, after)
	}
	if n, hits := compileAndCall(t, Config{CacheDir: t.TempDir()}, mod, ModuleConfig{}); n != 1 || hits != 0 {
		t.Fatalf("%d instrumentations, %d stub loads", n, hits)
	}
}
