package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestWarmLoadAnswersLikeColdLoad loads every example from an empty cache,
// then again from the warm cache (where host/wasm starts the module from a
// stub of it, running the cached machine code), and without any cache, and
// requires the same answer to every request of the example's testdata from
// all three.
func TestWarmLoadAnswersLikeColdLoad(t *testing.T) {
	ctx := context.Background()
	for _, dir := range []string{"examples/capabilities-drop", "examples/required-labels", "examples/go-image-registries", "examples/raw-validation"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			mod := testfixture.Module(t, dir)
			var settings json.RawMessage
			if b, err := os.ReadFile(testfixture.Path(dir + "/testdata/settings.json")); err == nil {
				settings = b
			}
			var requests []string
			files, err := filepath.Glob(testfixture.Path(dir + "/testdata/*.json"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if !strings.HasPrefix(filepath.Base(f), "settings") {
					requests = append(requests, f)
				}
			}
			if len(requests) == 0 {
				t.Fatal("no requests in testdata")
			}
			cacheDir := t.TempDir()
			answers := func(o policy.HostOptions) []string {
				h, err := policy.NewHost(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close(ctx)
				p, err := h.Load(ctx, policy.Spec{ID: dir, Module: mod, Settings: settings, PoolSize: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close(ctx)
				var out []string
				for _, f := range requests {
					req, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					var res *policy.Result
					if p.Metadata().IsRaw() {
						res, err = p.ValidateRaw(ctx, req)
					} else {
						res, err = p.Validate(ctx, req)
					}
					if err != nil {
						out = append(out, filepath.Base(f)+": error "+err.Error())
						continue
					}
					resp, _ := json.Marshal(res.Response)
					out = append(out, filepath.Base(f)+": "+string(resp)+" patch "+string(res.Patch))
				}
				return out
			}
			cold := answers(policy.HostOptions{CacheDir: cacheDir})
			if _, err := os.Stat(filepath.Join(cacheDir, "tollgate-load-v1-i"+strconv.Itoa(wasmbin.InstrumentVersion))); err != nil {
				t.Fatalf("the cold load left no load cache: %v", err)
			}
			var logs testfixture.SyncBuffer
			warm := answers(policy.HostOptions{CacheDir: cacheDir, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if !strings.Contains(logs.String(), "started from its stub") {
				t.Fatal("the warm load did not start the module from the load cache")
			}
			uncached := answers(policy.HostOptions{DisableCache: true})
			for i := range cold {
				if cold[i] != warm[i] || cold[i] != uncached[i] {
					t.Errorf("answers differ:\ncold     %s\nwarm     %s\nno cache %s", cold[i], warm[i], uncached[i])
				}
			}
			// The requests must exercise the policy: at least two different answers.
			distinct := map[string]bool{}
			for _, a := range cold {
				_, answer, _ := strings.Cut(a, ": ")
				distinct[answer] = true
			}
			if len(distinct) < 2 {
				t.Errorf("all %d requests got the same answer: %q", len(cold), cold)
			}
		})
	}
}

// TestWarmLoadLimits checks that a module started from the warm cache is
// still bounded: the interrupt check stops an endless loop at the deadline,
// and the memory cap stops a runaway allocation.
func TestWarmLoadLimits(t *testing.T) {
	ctx := context.Background()
	cacheDir := t.TempDir()
	mod := testfixture.Module(t, "test/testdata/policies/misbehave")
	for i, tt := range []struct {
		behaviour string
		timeout   time.Duration
		want      error
	}{
		{"accept", time.Second, nil}, // fills the cache
		{"loop", 500 * time.Millisecond, wasm.ErrTimeout},
		{"oom", 20 * time.Second, wasm.ErrMemoryLimit},
		{"trap", time.Second, wasm.ErrTrap},
	} {
		var logs testfixture.SyncBuffer
		h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: cacheDir, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]string{"behaviour": tt.behaviour})
		p, err := h.Load(ctx, policy.Spec{ID: tt.behaviour, Module: mod, Settings: b, Timeout: tt.timeout, MemoryLimitBytes: 16 << 20, PoolSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !strings.Contains(logs.String(), "started from its stub") {
			t.Errorf("%s: the module was not started from the load cache", tt.behaviour)
		}
		start := time.Now()
		_, err = p.Validate(ctx, []byte(podRequest))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.behaviour, err, tt.want)
		}
		if d := time.Since(start); d > tt.timeout+2*time.Second {
			t.Errorf("%s: answered after %s (deadline %s)", tt.behaviour, d, tt.timeout)
		}
		p.Close(ctx)
		_ = h.Close(ctx)
	}
}
