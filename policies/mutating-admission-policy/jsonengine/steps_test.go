//go:build mapsteps

package jsonengine

import (
	"testing"
)

// TestSteps prints the per-step profile natively (go test -tags mapsteps
// -run TestSteps -v): docs/benchmarks/mutating-admission-policy.md.
func TestSteps(t *testing.T) {
	steps, err := MeasureSteps(readSettings(t, "../testdata/label-settings.yml"), pod5k(t), 2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		t.Logf("%-70s mean %8.1f us  min %8.1f us", s.Name, float64(s.Mean.Nanoseconds())/1e3, float64(s.Min.Nanoseconds())/1e3)
	}
}
