package wasm

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	wapcwazero "github.com/wapc/wapc-go/engines/wazero"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// BenchmarkInstanceReuse calls one instance of the mutating TinyGo example
// b.N times with the realistic 5 KB Pod review and reports what a long-lived
// instance does over time: its linear memory after start and after the
// calls, and the CPU time per call of the last tenth of the calls against
// the first tenth (late/early; > 1 would mean an instance gets slower as it
// ages, e.g. a guest heap that grows and makes each collection slower).
// CPU time of the process rather than wall time, so that other work on the
// machine moves the ratio less. Run with -benchtime 20000x or more.
func BenchmarkInstanceReuse(b *testing.B) {
	ctx := context.Background()
	e, err := NewEngine(ctx, Config{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	mod, err := e.Compile(ctx, testfixture.Module(b, "examples/capabilities-drop"), ModuleConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer mod.Release()
	p, err := mod.NewPool(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	var rv struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(testfixture.File(b, "test/testdata/reviews/pod.json"), &rv); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"request":` + string(rv.Request) + `,"settings":{}}`)
	memory := func() uint32 {
		inst := <-p.idle
		defer func() { p.idle <- inst }()
		return inst.wi.(*wapcwazero.Instance).MemorySize()
	}
	startKB := memory() / 1024
	tenth := max(b.N/10, 1)
	var early, late time.Duration
	b.ResetTimer()
	c0 := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := p.Call(ctx, 0, "validate", payload); err != nil {
			b.Fatal(err)
		}
		switch i + 1 {
		case tenth:
			early = processCPU() - c0
		case b.N - tenth:
			c0 = processCPU()
		}
	}
	late = processCPU() - c0
	b.StopTimer()
	b.ReportMetric(float64(startKB), "mem-KB-start")
	b.ReportMetric(float64(memory()/1024), "mem-KB-end")
	if b.N >= 20 && early > 0 {
		b.ReportMetric(float64(late)/float64(early), "late/early")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
