package config

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateLimits: the admission limits of issue 20 are checked with
// errors naming the flag, its value and the bound.
func TestValidateLimits(t *testing.T) {
	for _, tt := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.PolicyWorkers = 5 }, "--policy-workers=5: invalid configuration: must be 0 (the default) to --workers (2)"},
		{func(o *Options) { o.PolicyWorkers = -1 }, "--policy-workers=-1"},
		{func(o *Options) { o.PolicyQueueSize = -3 }, "--policy-queue-size=-3: invalid configuration: must be >= 0"},
		{func(o *Options) { o.ShadowWorkers = 3 }, "--shadow-workers=3: invalid configuration: must be 0 (the default) to --workers (2)"},
		{func(o *Options) { o.ShadowQueueSize = -1 }, "--shadow-queue-size=-1: invalid configuration: must be 0 (the default) to 65536"},
		{func(o *Options) { o.MaxRequestBytesInFlight = 1000 }, "--max-request-bytes-in-flight=1000: invalid configuration: must be 0 (the default) or at least --max-request-bytes (3145728)"},
		{func(o *Options) { o.MaxConnections = 0 }, "--max-connections=0: invalid configuration: must be at least 1"},
		{func(o *Options) { o.InstanceRecycleGrowth = -1 }, "--instance-recycle-growth=-1: invalid configuration: must be >= 0 (0: never)"},
		// The module limits and compile budget (issue 30).
		{func(o *Options) { o.MaxModuleBytes = 0 }, "--max-module-bytes=0: invalid configuration: must be 1-1099511627776"},
		{func(o *Options) { o.MaxFunctionLocals = 1 << 32 }, "--max-function-locals=4294967296: invalid configuration: must be 1-4294967295"},
		{func(o *Options) { o.MaxNestingDepth = -1 }, "--max-nesting-depth=-1"},
		{func(o *Options) { o.MaxFunctionBodyBytes = 0 }, "--max-function-body-bytes=0"},
		{func(o *Options) { o.CompileTimeout = 0 }, "--compile-timeout=0s: invalid configuration: must be > 0"},
		{func(o *Options) { o.CompileMemoryLimit = 1 << 20 }, "--compile-memory-limit=1048576: invalid configuration: must be at least 64 MiB"},
		{func(o *Options) { o.PoliciesMemoryBudget = -1 }, "--policies-memory-budget=-1: invalid configuration: must be >= 0 (0: derived from the memory limit)"},
	} {
		o := Defaults()
		o.Workers = 2
		tt.set(&o)
		err := o.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
	o := Defaults()
	o.Workers, o.PolicyWorkers, o.MaxRequestBytesInFlight = 4, 4, o.MaxRequestBytes
	if err := o.Validate(); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
	// the shadow defaults: a quarter of the workers (at least 1), 16 places per shadow worker
	for _, tt := range []struct{ workers, shadowWorkers, want, wantQueue int }{{1, 0, 1, 16}, {2, 0, 1, 16}, {8, 0, 2, 32}, {8, 8, 8, 128}} {
		o := Defaults()
		o.Workers, o.ShadowWorkers = tt.workers, tt.shadowWorkers
		if got, q := o.EffectiveShadowWorkers(), o.EffectiveShadowQueueSize(); got != tt.want || q != tt.wantQueue || o.Validate() != nil {
			t.Errorf("workers %d, shadow workers %d: %d shadow workers, queue %d, %v; want %d, %d", tt.workers, tt.shadowWorkers, got, q, o.Validate(), tt.want, tt.wantQueue)
		}
	}
}
