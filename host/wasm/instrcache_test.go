package wasm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// compileAndCall compiles mod with a fresh engine on cfg, checks that the
// module is interruptible and answers a call, and returns the engine's
// counters: Instrument runs and instrumented-cache hits.
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
	return e.instrumented.Load(), e.icacheHits.Load()
}

func instrumentedFile(dir string, mod []byte) string {
	return filepath.Join(dir, instrumentedDirName(), strings.TrimPrefix(Digest(mod), "sha256:"))
}

// wantCacheFile checks that the cache file for mod holds exactly what
// wasmbin.Instrument makes of it.
func wantCacheFile(t *testing.T, dir string, mod []byte) {
	t.Helper()
	want, _, err := wasmbin.Instrument(mod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(instrumentedFile(dir, mod))
	if err != nil {
		t.Fatalf("the instrumented module was not cached: %v", err)
	}
	got, err := decodeInstrumented(b)
	if err != nil {
		t.Fatalf("cache file: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the cache file holds %d bytes that differ from Instrument's %d", len(got), len(want))
	}
}

func TestInstrumentedCacheHit(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 1 || hits != 0 {
		t.Fatalf("first load: %d instrumentations, %d cache hits; want 1, 0", n, hits)
	}
	wantCacheFile(t, dir, mod)
	// A new engine (a restarted process) reads the file instead of instrumenting.
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 0 || hits != 1 {
		t.Fatalf("second load: %d instrumentations, %d cache hits; want 0, 1", n, hits)
	}
	// So does one given the digest by its caller.
	if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{Digest: Digest(mod)}); n != 0 || hits != 1 {
		t.Fatalf("load with a known digest: %d instrumentations, %d cache hits; want 0, 1", n, hits)
	}
	// Without instrumentation nothing is read.
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
	if m.Interruptible() || e.icacheHits.Load() != 0 || e.instrumented.Load() != 0 {
		t.Fatalf("DisableInstrumentation: interruptible %v, %d hits, %d instrumentations", m.Interruptible(), e.icacheHits.Load(), e.instrumented.Load())
	}
}

func TestInstrumentedCacheBadFile(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	good, _, err := wasmbin.Instrument(mod)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := newInstrumentedCache(dir).put(Digest(mod), good); err != nil {
		t.Fatal(err)
	}
	goodFile, err := os.ReadFile(instrumentedFile(dir, mod))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) func([]byte) []byte {
		return func(b []byte) []byte { b = bytes.Clone(b); b[i] ^= 0x40; return b }
	}
	for _, tc := range []struct {
		name   string
		mangle func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }},
		{"header only", func(b []byte) []byte { return b[:instrumentedHeaderLen] }},
		{"bad magic", flip(0)},
		{"length", flip(len(instrumentedMagic) + 4)},
		{"module byte flipped", flip(instrumentedHeaderLen + (len(goodFile)-instrumentedHeaderLen)/2)},
		{"last byte flipped", flip(len(goodFile) - 1)},
		{"not wasm with a good checksum", func([]byte) []byte {
			c := newInstrumentedCache(t.TempDir())
			if err := c.put(Digest(mod), []byte("definitely not wasm")); err != nil {
				t.Fatal(err)
			}
			p, _ := c.path(Digest(mod))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(instrumentedFile(dir, mod), tc.mangle(goodFile), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := newInstrumentedCache(dir).get(Digest(mod)); err == nil {
				t.Fatal("get accepted the damaged file")
			}
			if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 1 || hits != 0 {
				t.Fatalf("%d instrumentations, %d cache hits; want 1, 0", n, hits)
			}
			wantCacheFile(t, dir, mod) // repaired
		})
	}
}

func TestInstrumentedCacheDisabled(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		if n, hits := compileAndCall(t, Config{CacheDir: dir, DisableCache: true}, mod, ModuleConfig{}); n != 1 || hits != 0 {
			t.Fatalf("load %d: %d instrumentations, %d cache hits; want 1, 0", i, n, hits)
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

func TestInstrumentedCacheUnwritable(t *testing.T) {
	mod := testfixture.Module(t, "examples/required-labels")
	dir := t.TempDir()
	// A file where the cache directory should be: nothing can be stored, and
	// loading works anyway.
	if err := os.WriteFile(filepath.Join(dir, instrumentedDirName()), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if n, hits := compileAndCall(t, Config{CacheDir: dir}, mod, ModuleConfig{}); n != 1 || hits != 0 {
			t.Fatalf("load %d: %d instrumentations, %d cache hits; want 1, 0", i, n, hits)
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
	if m != m2 || e.Modules() != 1 {
		t.Fatalf("a given digest and a computed one did not share the module (%d modules)", e.Modules())
	}
}
