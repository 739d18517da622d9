package mapdiff_test

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	wapc "github.com/wapc/wapc-go"
	wapcwazero "github.com/wapc/wapc-go/engines/wazero"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// The benchmark cases of docs/benchmarks.md: (a) a label-adding apply
// configuration and (b) the sidecar injection, on a Pod CREATE.
// label-apply-pod5k is the label case on test/testdata/reviews' 5 KB Pod.
var benchCases = []struct{ name, settings, object string }{
	{"label-apply", mkPolicy("label", "", apply(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`)), pod},
	{"sidecar", cases[2].settings, pod},
	{"unmatched", strings.Replace(mkPolicy("other", "", apply(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`)), "pods", "deployments", -1), pod},
	{"label-apply-pod5k", mkPolicy("label", "", labelApply), realisticPod},
	{"sidecar-any-pod5k", sidecarAnyPod, realisticPod},
}

// reportPercentiles reports the median and p99 of the iterations.
func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-us")
}

// BenchmarkMAPEvaluate compares one evaluation through the Wasm module via
// the host (request encoding, guest call, response decoding, JSONPatch diff)
// with Kubernetes' own plugin evaluating the same request natively.
func BenchmarkMAPEvaluate(b *testing.B) {
	module := loadModule(b)
	ctx := context.Background()
	for _, bc := range benchCases {
		r := newRequest(b, "CREATE", bc.object, "")
		b.Run(bc.name+"/wasm", func(b *testing.B) {
			h, err := policy.NewHost(ctx, policy.HostOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(ctx)
			settings, _ := yaml.YAMLToJSON([]byte(bc.settings))
			p, err := h.Load(ctx, policy.Spec{ID: bc.name, Module: module, Settings: settings, PoolSize: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			req := r.admissionRequest(b)
			if res, err := p.Validate(ctx, req); err != nil || (res.Patch == nil) != (bc.name == "unmatched") {
				b.Fatalf("warm-up: %v (patch %s)", err, res.Patch)
			}
			d := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := p.Validate(ctx, req); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, d)
		})
		b.Run(bc.name+"/native", func(b *testing.B) {
			ref := newReference(b, bc.settings, []string{r.namespace})
			if o := ref.evaluate(b, r); (o.Object == "") != (bc.name == "unmatched") {
				b.Fatalf("warm-up: %s", o)
			}
			d := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				ref.evaluate(b, r)
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, d)
		})
	}
}

// BenchmarkMAPLoad measures loading the module as a policy (compile or read
// the compilation cache, instantiate, validate_settings compiling the CEL),
// from a warm compilation cache and from an empty one.
func BenchmarkMAPLoad(b *testing.B) {
	module := loadModule(b)
	ctx := context.Background()
	settings, _ := yaml.YAMLToJSON([]byte(benchCases[1].settings))
	load := func(b *testing.B, cacheDir string) {
		h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: cacheDir})
		if err != nil {
			b.Fatal(err)
		}
		p, err := h.Load(ctx, policy.Spec{ID: "load", Module: module, Settings: settings, PoolSize: 1, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		p.Close(ctx)
		h.Close(ctx)
	}
	b.Run("warm-cache", func(b *testing.B) {
		dir := b.TempDir()
		load(b, dir)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			load(b, dir)
		}
		b.ReportMetric(float64(len(module)), "module-bytes")
	})
	b.Run("cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dir, err := os.MkdirTemp("", "map-cold-")
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			load(b, dir)
			b.StopTimer()
			os.RemoveAll(dir)
			b.StartTimer()
		}
	})
}

// newWapcInstance instantiates the module with wapc-go's wazero engine and a
// compilation cache, without the host's close-on-context-done.
func newWapcInstance(b *testing.B, module []byte, cacheDir string, closeOnDone bool) (wapc.Module, wapc.Instance, func()) {
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
	if err != nil {
		b.Fatal(err)
	}
	engine := wapcwazero.EngineWithRuntime(func(ctx context.Context) (wazero.Runtime, error) {
		r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(closeOnDone))
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
			return nil, err
		}
		return r, nil
	})
	mod, err := engine.New(ctx, func(context.Context, string, string, string, []byte) ([]byte, error) { return nil, nil }, module, &wapc.ModuleConfig{Stdout: os.Stderr, Stderr: os.Stderr})
	if err != nil {
		b.Fatal(err)
	}
	mod.(*wapcwazero.Module).WithConfig(func(c wazero.ModuleConfig) wazero.ModuleConfig { return c.WithStartFunctions("_initialize") })
	inst, err := mod.Instantiate(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return mod, inst, func() { inst.Close(ctx); mod.Close(ctx); cache.Close(ctx) }
}

// BenchmarkMAPEvaluateWapc is the sidecar evaluation straight through
// wapc-go (no host pool, limits or diff): with wazero's close-on-context-done,
// without it, and without it on the module as the host instruments it (the
// interrupt check of host/wasm/wasmbin), to show what each costs this module.
func BenchmarkMAPEvaluateWapc(b *testing.B) {
	module := loadModule(b)
	instrumented, _, err := wasmbin.Instrument(module)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	settings, _ := yaml.YAMLToJSON([]byte(benchCases[1].settings))
	req := newRequest(b, "CREATE", pod, "").admissionRequest(b)
	payload, _ := json.Marshal(map[string]json.RawMessage{"request": req, "settings": settings})
	cacheDir := b.TempDir()
	for _, v := range []struct {
		name        string
		module      []byte
		closeOnDone bool
	}{
		{"close-on-context-done", module, true},
		{"no-close-on-context-done", module, false},
		{"instrumented", instrumented, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			_, inst, done := newWapcInstance(b, v.module, cacheDir, v.closeOnDone)
			defer done()
			if _, err := inst.Invoke(ctx, "validate", payload); err != nil {
				b.Fatal(err)
			}
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := inst.Invoke(ctx, "validate", payload); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, d)
		})
	}
}

// BenchmarkMAPInstanceMemory reports the linear memory of one instance after
// validate_settings and one validate, and after 1000 more validates (wapc-go's
// wazero engine, as the host). Run it with -benchtime 1x.
func BenchmarkMAPInstanceMemory(b *testing.B) {
	module := loadModule(b)
	ctx := context.Background()
	settings, _ := yaml.YAMLToJSON([]byte(benchCases[1].settings))
	req := newRequest(b, "CREATE", pod, "").admissionRequest(b)
	payload, _ := json.Marshal(map[string]json.RawMessage{"request": req, "settings": settings})
	cacheDir := b.TempDir()
	for i := 0; i < b.N; i++ {
		_, inst, done := newWapcInstance(b, module, cacheDir, false)
		afterInit := inst.MemorySize()
		if _, err := inst.Invoke(ctx, "validate_settings", settings); err != nil {
			b.Fatal(err)
		}
		if _, err := inst.Invoke(ctx, "validate", payload); err != nil {
			b.Fatal(err)
		}
		afterOne := inst.MemorySize()
		// The steady state: the garbage collector's heap target is reached
		// after some requests, and linear memory never shrinks.
		start := time.Now()
		for j := 0; j < 1000; j++ {
			if _, err := inst.Invoke(ctx, "validate", payload); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "mean-us-per-validate")
		b.ReportMetric(float64(afterInit), "memory-after-init-bytes")
		b.ReportMetric(float64(afterOne), "memory-after-validate-bytes")
		b.ReportMetric(float64(inst.MemorySize()), "memory-after-1000-validates-bytes")
		done()
	}
}
