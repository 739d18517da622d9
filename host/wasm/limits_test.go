package wasm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// TestCompileRefusesOverLimits: the engine refuses, before wazero sees
// them, modules over its structural limits, with the limit in the error,
// in every cache mode. The modules of issue 30 (4e9 locals: the process
// dies of OOM in wazero's compiler; 1e9 locals in 1,000 entries: a panic
// after 60 s; 50,000 nested blocks: 66 s of compile) are here with
// the bounded variants that show the old engine compiled them (60,000
// locals, 20,001 nested blocks and ifs: accepted before, after 49 s and
// 6 min of compile; 10,001 is in between).
func TestCompileRefusesOverLimits(t *testing.T) {
	cases := []struct {
		name   string
		module []byte
		want   string
	}{
		{"locals 4e9", hostile.Locals(4_000_000_000), "function 1 declares 4000000000 locals; the limit is 50000"},
		{"locals spread 1e9", hostile.LocalsSpread(1000, 1_000_000), "function 1 declares 1000000000 locals; the limit is 50000"},
		{"locals 60000", hostile.Locals(60_000), "function 1 declares 60000 locals; the limit is 50000"},
		{"nested blocks 50000", hostile.NestedBlocks(50_000), "function 1 nests blocks 50000 deep; the limit is 10000"},
		{"nested blocks 10001", hostile.NestedBlocks(10_001), "function 1 nests blocks 10001 deep; the limit is 10000"},
		{"nested ifs 10001", hostile.NestedIfs(10_001), "function 1 nests blocks 10001 deep; the limit is 10000"},
	}
	for _, mode := range []struct {
		name string
		cfg  func(t *testing.T) wasm.Config
	}{
		{"no cache", func(*testing.T) wasm.Config { return wasm.Config{DisableCache: true} }},
		{"load cache", func(t *testing.T) wasm.Config { return wasm.Config{CacheDir: t.TempDir()} }},
		{"uninstrumented", func(*testing.T) wasm.Config { return wasm.Config{DisableCache: true, DisableInstrumentation: true} }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e, err := wasm.NewEngine(context.Background(), mode.cfg(t))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			for _, c := range cases {
				start := time.Now()
				m, err := e.Compile(context.Background(), c.module, wasm.ModuleConfig{})
				if err == nil {
					m.Release()
					t.Fatalf("%s: compiled (in %s), want refused", c.name, time.Since(start))
				}
				var le *wasmbin.LimitError
				if !errors.Is(err, wasm.ErrLimit) || !errors.Is(err, wasm.ErrCompile) || !errors.As(err, &le) {
					t.Fatalf("%s: %v, want ErrCompile, ErrLimit and a LimitError", c.name, err)
				}
				if !strings.HasSuffix(err.Error(), c.want) {
					t.Fatalf("%s: %q, want it to end with %q", c.name, err, c.want)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("%s: refused after %s", c.name, d)
				}
			}
		})
	}
}

// TestCompileLimitsConfigured: Config.Limits raises a limit (a module the
// defaults refuse compiles) and lowers one; the module size is checked
// before the module is read.
func TestCompileLimitsConfigured(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, wasm.Config{Limits: wasm.Limits{Locals: 60_000, Nesting: 100}})
	m, err := e.Compile(ctx, hostile.Locals(60_000), wasm.ModuleConfig{})
	if err != nil {
		t.Fatalf("60,000 locals with the limit at 60,000: %v", err)
	}
	m.Release()
	if _, err := e.Compile(ctx, hostile.NestedBlocks(101), wasm.ModuleConfig{}); !errors.Is(err, wasm.ErrLimit) {
		t.Fatalf("101 nested blocks with the limit at 100: %v", err)
	}
	small := newEngine(t, wasm.Config{Limits: wasm.Limits{ModuleBytes: 100}})
	_, err = small.Compile(ctx, hostile.Functions(100), wasm.ModuleConfig{})
	if !errors.Is(err, wasm.ErrLimit) || !strings.Contains(err.Error(), "the limit is 100") {
		t.Fatalf("module over 100 bytes: %v", err)
	}
}

// TestWarmLoadScreensUnderLowerLimits: a module screened and cached under
// higher limits is screened again, and refused, by an engine with lower
// ones sharing the cache directory (the screened marker names the limits).
func TestWarmLoadScreensUnderLowerLimits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mod := hostile.NestedBlocks(300)
	high, err := wasm.NewEngine(ctx, wasm.Config{CacheDir: dir, Limits: wasm.Limits{Nesting: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := high.Compile(ctx, mod, wasm.ModuleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m.Release()
	_ = high.Close(ctx)
	low, err := wasm.NewEngine(ctx, wasm.Config{CacheDir: dir, Limits: wasm.Limits{Nesting: 200}})
	if err != nil {
		t.Fatal(err)
	}
	defer low.Close(ctx)
	if _, err := low.Compile(ctx, mod, wasm.ModuleConfig{}); !errors.Is(err, wasm.ErrLimit) {
		t.Fatalf("warm load under a lower limit: %v, want ErrLimit", err)
	}
}

// TestDefaultLimitsAcceptKnownModules: every module the repository builds
// (examples, policies, built-ins, test fixtures: TinyGo, standard Go,
// Rego) passes the default limits; the largest of each size is logged
// (go test -v), the measure the defaults were chosen from
// (RATIONALE.md, "Why these structural limits, checked before compiling?").
func TestDefaultLimitsAcceptKnownModules(t *testing.T) {
	var files []string
	for _, pattern := range []string{"examples/*/*.wasm", "policies/*/*.wasm", "host/builtin/modules/*.wasm", "test/testdata/policies/*/*.wasm"} {
		m, err := filepath.Glob(testfixture.Path(pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("%d built modules found: build the policies first (make policies)", len(files))
	}
	var most wasmbin.Stats
	where := map[string]string{}
	d := wasmbin.DefaultLimits()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if wasmbin.Check(b) != nil {
			continue // not-wasm.wasm and the like
		}
		rel, _ := filepath.Rel(testfixture.Root(), f)
		st, err := wasmbin.MeasureLimits(b)
		if err != nil {
			if errors.Is(err, wasmbin.ErrUnsupported) {
				continue // a module using a proposal tollgate refuses (refused either way)
			}
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if err := wasmbin.CheckLimits(b, wasm.Limits{}); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
		for _, c := range []struct {
			name string
			v    uint64
			m    *uint64
		}{
			{"module bytes", st.ModuleBytes, &most.ModuleBytes},
			{"table entries", st.TableEntries, &most.TableEntries},
		} {
			if c.v > *c.m {
				*c.m, where[c.name] = c.v, rel
			}
		}
		for _, c := range []struct {
			name string
			v    uint32
			m    *uint32
		}{
			{"types", st.Types, &most.Types}, {"functions", st.Functions, &most.Functions},
			{"imports", st.Imports, &most.Imports}, {"exports", st.Exports, &most.Exports},
			{"globals", st.Globals, &most.Globals}, {"data segments", st.DataSegments, &most.DataSegments},
			{"params", st.Params, &most.Params}, {"results", st.Results, &most.Results},
			{"locals", st.Locals, &most.Locals}, {"body bytes", st.BodyBytes, &most.BodyBytes},
			{"nesting", st.Nesting, &most.Nesting},
		} {
			if c.v > *c.m {
				*c.m, where[c.name] = c.v, rel
			}
		}
	}
	t.Logf("largest of %d modules: %+v", len(files), most)
	for k, v := range where {
		t.Logf("  %s: %s", k, v)
	}
	// The defaults keep a margin over what real modules hold.
	if most.Locals*4 > d.Locals || most.BodyBytes*2 > d.BodyBytes || most.Nesting*2 > d.Nesting || most.ModuleBytes*3 > d.ModuleBytes {
		t.Errorf("a default limit is less than twice (four times for locals, three for the size) the largest known: %+v vs %+v", most, d)
	}
}
