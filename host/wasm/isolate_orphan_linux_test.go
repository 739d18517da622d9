package wasm_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// parentEnv makes TestCompileChildDiesWithItsParent's process the server
// whose death is tested: it compiles a module that takes minutes.
const parentEnv = "TOLLGATE_TEST_COMPILE_PARENT"

// TestCompileChildDiesWithItsParent: when the process that started a
// compile child dies without a word (kill -9, the OOM killer), the child
// dies with it instead of compiling on, orphaned, for up to
// --compile-timeout with up to --compile-memory-limit. Checked to fail
// before diesWithParent: the child ran on with parent 1.
func TestCompileChildDiesWithItsParent(t *testing.T) {
	if os.Getenv(parentEnv) != "" {
		// The parent: 20,000 nested ifs take the compiler minutes.
		e, err := wasm.NewEngine(context.Background(), wasm.Config{Limits: noLimits, DisableCache: true, CompileTimeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Compile(context.Background(), hostile.NestedIfs(20_000), wasm.ModuleConfig{})
		t.Fatalf("the compile ended before the parent was killed: %v", err)
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestCompileChildDiesWithItsParent$")
	parent.Env = append(os.Environ(), parentEnv+"=1")
	var out bytes.Buffer
	parent.Stdout, parent.Stderr = &out, &out
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { parent.Wait(); close(exited) }()
	t.Cleanup(func() { parent.Process.Kill(); <-exited })

	var child int
	deadline := time.Now().Add(2 * time.Minute)
	for child == 0 {
		child = compileChildOf(parent.Process.Pid)
		select {
		case <-exited:
			t.Fatalf("the parent exited before it started a compile child:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no compile child of %d after 2 minutes", parent.Process.Pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed := time.Now()
	for alive(child) {
		if time.Since(killed) > time.Minute {
			t.Fatalf("compile child %d still runs %s after its parent was killed", child, time.Since(killed).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("compile child %d gone %s after its parent was killed", child, time.Since(killed).Round(time.Millisecond))
}

// compileChildOf is the pid of a compile child of pid, or 0.
func compileChildOf(pid int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		dir := filepath.Dir(f)
		if cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline")); bytes.HasPrefix(cmdline, []byte("tollgate-wasm-compiler")) {
			n, _ := strconv.Atoi(filepath.Base(dir))
			return n
		}
	}
	return 0
}

// alive reports whether pid runs (a zombie waiting to be reaped does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}
