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
		{func(o *Options) { o.MaxRequestBytesInFlight = 1000 }, "--max-request-bytes-in-flight=1000: invalid configuration: must be 0 (the default) or at least --max-request-bytes (3145728)"},
		{func(o *Options) { o.MaxConnections = 0 }, "--max-connections=0: invalid configuration: must be at least 1"},
		{func(o *Options) { o.InstanceRecycleGrowth = -1 }, "--instance-recycle-growth=-1: invalid configuration: must be >= 0 (0: never)"},
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
}
