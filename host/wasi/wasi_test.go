package wasi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/tollgate-dev/tollgate/host/wasi"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const fixture = "test/testdata/policies/wasi-misbehave"

var (
	cacheOnce sync.Once
	cache     wazero.CompilationCache
)

func sharedCache() wazero.CompilationCache {
	cacheOnce.Do(func() { cache = wazero.NewCompilationCache() })
	return cache
}

func compile(t testing.TB, cfg wasi.Config) *wasi.Module {
	t.Helper()
	m, err := wasi.Compile(context.Background(), sharedCache(), testfixture.Module(t, fixture), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func doc(behaviour string) []byte {
	return []byte(fmt.Sprintf(`{"request":{"uid":"u","object":{"metadata":{"name":"x"}}},"settings":{"behaviour":%q,"binding":"b"}}`, behaviour))
}

func TestRun(t *testing.T) {
	for _, ahead := range []int{0, 2} {
		m := compile(t, wasi.Config{Ahead: ahead, AheadArgs: []string{"validate"}, MemoryLimitBytes: 64 << 20, MaxOutputBytes: 1 << 20})
		hc := func(ctx context.Context, binding, ns, op string, payload []byte) ([]byte, error) {
			if binding == "fail" {
				return nil, errors.New("no such thing")
			}
			return []byte(binding + "/" + ns + "/" + op + " " + string(payload)), nil
		}
		for _, tc := range []struct {
			behaviour string
			exit      uint32
			stdout    string // substring
			stderr    string // substring
			err       error
		}{
			{behaviour: "accept", stdout: `{"accepted":true}`},
			{behaviour: "reject", stdout: `"rejected by behaviour"`},
			{behaviour: "echo", stdout: `\"behaviour\":\"echo\"`},
			{behaviour: "fatal", exit: 1, stderr: "something went badly wrong"},
			{behaviour: "exit", exit: 7, stderr: "exiting with 7"},
			{behaviour: "panic", exit: 2, stderr: "assignment to entry in nil map"},
			{behaviour: "garbage", stdout: "this is not JSON"},
			{behaviour: "stdin-again", stdout: "read 0 more bytes"},
			{behaviour: "hostcall", stdout: `host answer: b/ns/op {\"q\":1}`},
			{behaviour: "loop", err: wasm.ErrTimeout},
			{behaviour: "alloc", err: wasm.ErrMemoryLimit},
			{behaviour: "big", err: wasi.ErrOutputLimit},
		} {
			t.Run(fmt.Sprintf("ahead%d/%s", ahead, tc.behaviour), func(t *testing.T) {
				timeout := 500 * time.Millisecond
				if tc.behaviour == "alloc" || tc.behaviour == "big" {
					timeout = 10 * time.Second // filling 64 MB, or writing past the output cap, on a loaded machine
				}
				res, err := m.Run(context.Background(), timeout, []string{"validate"}, doc(tc.behaviour), hc)
				if tc.err != nil {
					if !errors.Is(err, tc.err) {
						t.Fatalf("err = %v, want %v", err, tc.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if res.ExitCode != tc.exit || !strings.Contains(string(res.Stdout), tc.stdout) || !strings.Contains(string(res.Stderr), tc.stderr) {
					t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
				}
				if ahead > 0 && tc.behaviour == "accept" && !res.Ahead { // the first Run: started at Compile
					t.Errorf("not started ahead")
				}
			})
		}
	}
}

func TestHostCallError(t *testing.T) {
	m := compile(t, wasi.Config{})
	res, err := m.Run(context.Background(), time.Second, []string{"validate"}, []byte(`{"settings":{"behaviour":"hostcall","binding":"x"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Stdout), "host error: host call failed: no host capabilities are available for x/ns/op") {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestValidateSettingsArgv(t *testing.T) {
	m := compile(t, wasi.Config{Ahead: 1, AheadArgs: []string{"validate"}})
	res, err := m.Run(context.Background(), time.Second, []string{"validate-settings"}, []byte(`{"behaviour":"invalid"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ahead || string(res.Stdout) != `{"valid":false,"message":"behaviour invalid is refused"}` {
		t.Fatalf("ahead %v stdout %q", res.Ahead, res.Stdout)
	}
	res, err = m.Run(context.Background(), time.Second, []string{"nonsense"}, nil, nil)
	if err != nil || res.ExitCode != 1 || !strings.Contains(string(res.Stderr), `unknown command "nonsense"`) {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestCloseStopsInstancesAhead(t *testing.T) {
	m, err := wasi.Compile(context.Background(), sharedCache(), testfixture.Module(t, fixture), wasi.Config{Ahead: 3, AheadArgs: []string{"validate"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(context.Background(), time.Second, []string{"validate"}, doc("accept"), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close hangs")
	}
	if _, err := m.Run(context.Background(), time.Second, []string{"validate"}, doc("accept"), nil); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestNotCommand(t *testing.T) {
	_, err := wasi.Compile(context.Background(), nil, testfixture.Module(t, "examples/go-image-registries"), wasi.Config{})
	if !errors.Is(err, wasi.ErrNotCommand) {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkRun measures one evaluation of a standard-Go command: on demand
// (Go runtime start in `_start` on the critical path) and with instances
// started ahead, back to back (the replacement of the instance taken competes
// with the next evaluation) and paced (10 ms idle between evaluations, the
// time the replacement needs). start-us/op is the mean time from
// instantiation to the guest's first read of stdin, spent on the evaluation's
// critical path (zero when the instance was started ahead).
func BenchmarkRun(b *testing.B) {
	for _, paced := range []bool{false, true} {
		for _, ahead := range []int{0, 1} {
			b.Run(fmt.Sprintf("paced=%v/ahead=%d", paced, ahead), func(b *testing.B) {
				m := compile(b, wasi.Config{Ahead: ahead, AheadArgs: []string{"validate"}})
				in := doc("accept")
				var start time.Duration
				for b.Loop() {
					if paced {
						b.StopTimer()
						time.Sleep(10 * time.Millisecond)
						b.StartTimer()
					}
					res, err := m.Run(context.Background(), 5*time.Second, []string{"validate"}, in, nil)
					if err != nil || res.ExitCode != 0 {
						b.Fatal(err, res)
					}
					if !res.Ahead {
						start += res.Start
					}
				}
				b.ReportMetric(float64(start.Microseconds())/float64(b.N), "start-us/op")
			})
		}
	}
}

// TestSleepStopsAtDeadline: a guest's time.Sleep really waits (a short one
// ends after its length and the guest answers), but a sleep past the
// deadline ends at the deadline: the invocation returns wasm.ErrTimeout then,
// not when the 20 s sleep would have ended, and the instance is gone.
func TestSleepStopsAtDeadline(t *testing.T) {
	for _, ahead := range []int{0, 1} {
		m := compile(t, wasi.Config{Ahead: ahead, AheadArgs: []string{"validate"}})
		t0 := time.Now()
		res, err := m.Run(context.Background(), 10*time.Second, []string{"validate"},
			[]byte(`{"request":{"uid":"u"},"settings":{"behaviour":"sleep","seconds":0.3}}`), nil)
		if err != nil || !strings.Contains(string(res.Stdout), `"accepted":true`) {
			t.Fatalf("ahead %d: a 0.3 s sleep: %v %+v", ahead, err, res)
		}
		if took := time.Since(t0); took < 300*time.Millisecond {
			t.Errorf("ahead %d: a 0.3 s sleep returned after %v: the guest's sleep does not wait", ahead, took)
		}
		t0 = time.Now()
		_, err = m.Run(context.Background(), 500*time.Millisecond, []string{"validate"}, doc("sleep"), nil)
		took := time.Since(t0)
		if !errors.Is(err, wasm.ErrTimeout) {
			t.Fatalf("ahead %d: a 20 s sleep with a 500 ms deadline: err = %v, want a timeout", ahead, err)
		}
		if took > 2*time.Second {
			t.Fatalf("ahead %d: a 20 s sleep with a 500 ms deadline returned after %v", ahead, took)
		}
		// the caller's cancellation ends a sleep too
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t0 = time.Now()
		_, err = m.Run(ctx, 0, []string{"validate"}, doc("sleep"), nil)
		cancel()
		if took := time.Since(t0); err == nil || took > 2*time.Second {
			t.Fatalf("ahead %d: a 20 s sleep whose context ends after 300 ms: err = %v after %v", ahead, err, took)
		}
	}
}
