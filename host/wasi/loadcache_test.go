package wasi_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasi"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadWith(t *testing.T, dir string, code []byte) (*wasi.Module, time.Duration, time.Duration) {
	t.Helper()
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	start, cpu := time.Now(), cpuTime()
	m, err := wasi.Compile(ctx, e.CompilationCache(), code, wasi.Config{Engine: e})
	if err != nil {
		t.Fatal(err)
	}
	wall, used := time.Since(start), cpuTime()-cpu
	t.Cleanup(func() { _ = m.Close(ctx) })
	return m, wall, used
}

// answers runs validate-settings and validate on a request.
func answers(t *testing.T, m *wasi.Module, request []byte) string {
	t.Helper()
	var out []string
	for _, c := range []struct {
		args  []string
		stdin []byte
	}{{[]string{"validate-settings"}, []byte(`{}`)}, {[]string{"validate"}, []byte(`{"request":` + string(request) + `,"settings":{}}`)}} {
		res, err := m.Run(context.Background(), 30*time.Second, c.args, c.stdin, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Stdout) == 0 {
			t.Fatalf("%v: no answer; exit code %d, stderr %s", c.args, res.ExitCode, res.Stderr)
		}
		out = append(out, string(res.Stdout))
	}
	return strings.Join(out, "\n")
}

// TestBigModuleLoadFromCache: a 20 MB standard-Go WASI policy is compiled
// once; a later load from the same cache directory compiles its stub from
// the load cache only (no decoding and validating of its code) and answers
// the same. The times are logged (docs/benchmarks.md records them).
func TestBigModuleLoadFromCache(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a 20 MB module (tens of seconds on 2 cores)")
	}
	code := testfixture.Module(t, "test/testdata/policies/wasi-big")
	var review struct{ Request json.RawMessage }
	if err := json.Unmarshal(testfixture.File(t, "test/testdata/reviews/pod.json"), &review); err != nil {
		t.Fatal(err)
	}
	request := review.Request
	dir := t.TempDir()
	cold, coldWall, coldCPU := loadWith(t, dir, code)
	if cold.FromLoadCache() {
		t.Fatal("the first load came from the load cache")
	}
	want := answers(t, cold, request)
	if !strings.Contains(want, `"valid":true`) || !strings.Contains(want, `"accepted":true`) {
		t.Fatalf("the big policy's answers: %s", want)
	}
	var best time.Duration
	for i := range 3 {
		warm, wall, cpu := loadWith(t, dir, code)
		if !warm.FromLoadCache() {
			t.Fatalf("load %d: not from the load cache", i+2)
		}
		if got := answers(t, warm, request); got != want {
			t.Fatalf("warm answers differ:\n%s\nwant\n%s", got, want)
		}
		if best == 0 || wall < best {
			best = wall
		}
		t.Logf("warm load %d: %v (CPU %v)", i+1, wall.Round(time.Millisecond), cpu.Round(time.Millisecond))
	}
	b, _ := os.ReadFile("/proc/loadavg")
	t.Logf("module %d bytes: cold load %v (CPU %v), best warm load %v; loadavg %s",
		len(code), coldWall.Round(time.Millisecond), coldCPU.Round(time.Millisecond), best.Round(time.Millisecond), strings.TrimSpace(string(b)))
	if best*4 > coldWall {
		t.Errorf("warm load %v is not a quarter of the cold load %v", best, coldWall)
	}
}

// TestLoadCacheDamagedStub: a stub that is damaged is thrown away and the
// module compiled again (and stored again), never a failed load.
func TestLoadCacheDamagedStub(t *testing.T) {
	code := testfixture.Module(t, fixture)
	dir := t.TempDir()
	m, _, _ := loadWith(t, dir, code)
	want := answers(t, m, []byte(`{"uid":"x"}`))
	stubs, err := filepath.Glob(filepath.Join(dir, "*", "wasi-*", "stub.wasm"))
	if err != nil || len(stubs) != 1 {
		t.Fatalf("stub files %v, %v; want one", stubs, err)
	}
	if err := os.WriteFile(stubs[0], []byte("tgstub\x00\x01garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2, _, _ := loadWith(t, dir, code)
	if m2.FromLoadCache() {
		t.Fatal("loaded from a damaged stub")
	}
	if got := answers(t, m2, []byte(`{"uid":"x"}`)); got != want {
		t.Fatalf("answers after a damaged stub: %s, want %s", got, want)
	}
	m3, _, _ := loadWith(t, dir, code)
	if !m3.FromLoadCache() {
		t.Fatal("the entry was not repaired: the next load compiled again")
	}
}
