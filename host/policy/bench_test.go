package policy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// BenchmarkEvaluate measures one evaluation (request encoding, guest call,
// response decoding and diff) of the examples on a small Pod request and on
// realistic objects (test/testdata/reviews), and
// reports the share of the time spent outside the guest (host-overhead-%).
func BenchmarkEvaluate(b *testing.B) {
	for _, bc := range []struct {
		name, dir, request, settings string
	}{
		{"required-labels-tinygo", "examples/required-labels", "examples/required-labels/testdata/pod-no-labels.json", "examples/required-labels/testdata/settings.json"},
		{"capabilities-drop-tinygo-mutating", "examples/capabilities-drop", "examples/capabilities-drop/testdata/pod-adds-capabilities.json", ""},
		{"capabilities-drop-tinygo-mutating-pod5k", "examples/capabilities-drop", "test/testdata/reviews/pod.json", ""},
		{"required-labels-tinygo-configmap50k", "examples/required-labels", "test/testdata/reviews/configmap-50k.json", "examples/required-labels/testdata/settings.json"},
		{"go-image-registries-stdgo", "examples/go-image-registries", "examples/go-image-registries/testdata/pod-allowed.json", "examples/go-image-registries/testdata/settings.json"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(context.Background())
			var settings json.RawMessage
			if bc.settings != "" {
				settings = testfixture.File(b, bc.settings)
			}
			p, err := h.Load(context.Background(), policy.Spec{ID: bc.name, Module: testfixture.Module(b, bc.dir), Settings: settings, PoolSize: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			req, err := admission.ParseReview(testfixture.File(b, bc.request))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var guest, total time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := p.Evaluate(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				guest += res.GuestDuration
				total += res.Duration
			}
			if total > 0 {
				b.ReportMetric(100*(1-float64(guest)/float64(total)), "host-overhead-%")
			}
		})
	}
}

// BenchmarkLoad measures loading a policy (compile + instantiate +
// validate_settings) with a cold and a warm on-disk compilation cache.
func BenchmarkLoad(b *testing.B) {
	for _, bc := range []struct{ name, dir string }{
		{"tinygo-required-labels", "examples/required-labels"},
		{"stdgo-image-registries", "examples/go-image-registries"},
	} {
		mod := testfixture.Module(b, bc.dir)
		settings := json.RawMessage(testfixture.File(b, bc.dir+"/testdata/settings.json"))
		b.Run(bc.name+"/cold", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				loadOnce(b, b.TempDir(), mod, settings)
			}
		})
		b.Run(bc.name+"/warm", func(b *testing.B) {
			dir := b.TempDir()
			loadOnce(b, dir, mod, settings) // fills the cache
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				loadOnce(b, dir, mod, settings)
			}
		})
	}
}

func loadOnce(b *testing.B, cacheDir string, mod []byte, settings json.RawMessage) {
	ctx := context.Background()
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: cacheDir})
	if err != nil {
		b.Fatal(err)
	}
	p, err := h.Load(ctx, policy.Spec{ID: "bench", Module: mod, Settings: settings, PoolSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	p.Close(ctx)
	_ = h.Close(ctx)
}
