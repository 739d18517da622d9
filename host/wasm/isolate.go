package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// Compiling in a separate process (RATIONALE.md, "Why compile modules in a
// separate process?"): wazero's compiler cannot be interrupted and its time
// and memory grow with what a module holds, faster than linearly for some
// shapes (deep nesting). So the engine runs the compile of a module it has
// not compiled before in a child process of the same binary, with an address
// space limit, a CPU-time limit and a wall deadline; the child leaves the
// compiled code and the stub of the module in a load-cache directory, which
// the engine then loads cache-only. A compile over its budget fails only
// its module, with the reason (ErrCompileBudget).
//
// The child is this binary, started with compileChildEnv set: this
// package's init runs the compile and exits before main (or TestMain) runs,
// so every binary that links this package can be its own compiler.

// ErrCompileBudget is wrapped (with ErrCompile) by the error for a compile
// that took more than its time, CPU or memory budget and was stopped.
var ErrCompileBudget = errors.New("compile budget exceeded")

// Defaults of Config.CompileTimeout and Config.CompileMemoryBytes.
const (
	DefaultCompileTimeout     = 10 * time.Minute
	DefaultCompileMemoryBytes = 3 << 30
)

const compileChildEnv = "TOLLGATE_WASM_COMPILE_CHILD"

// childRequest is what the parent asks of a compile child (in
// compileChildEnv, as JSON; the code comes on its stdin).
type childRequest struct {
	Dir string `json:"dir"`
	// CloseOnDone is the runtime's close-on-context-done setting, part of
	// wazero's cache key.
	CloseOnDone bool   `json:"closeOnDone"`
	Workers     int    `json:"workers"`
	Memory      uint64 `json:"memory"`
	CPUSeconds  uint64 `json:"cpuSeconds"`
}

// Exit codes of a compile child.
const (
	childOK      = 0
	childRefused = 3 // wazero refused the module: stderr is its message
	childFailed  = 4 // anything else the child could say: stderr is the message
)

func init() {
	if req, ok := os.LookupEnv(compileChildEnv); ok {
		os.Exit(runCompileChild(req))
	}
}

// runCompileChild is the whole life of a compile child.
func runCompileChild(reqJSON string) int {
	var req childRequest
	if err := json.Unmarshal([]byte(reqJSON), &req); err != nil || req.Dir == "" {
		fmt.Fprintf(os.Stderr, "%s holds no valid compile request: %q\n", compileChildEnv, reqJSON)
		return childFailed
	}
	if err := limitSelf(req.Memory, req.CPUSeconds); err != nil {
		fmt.Fprintf(os.Stderr, "setting the compile limits: %v\n", err)
		return childFailed
	}
	if req.Memory > 0 {
		// Collect harder near the budget: what counts is what is live.
		debug.SetMemoryLimit(int64(req.Memory / 4 * 3))
	}
	code, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading the module: %v\n", err)
		return childFailed
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(req.Dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "compilation cache %s: %v\n", req.Dir, err)
		return childFailed
	}
	compile := func(ctx context.Context, code []byte, cache wazero.CompilationCache) (struct{}, func(), error) {
		r := wazero.NewRuntimeWithConfig(ctx, NewRuntimeConfig(cache).WithCloseOnContextDone(req.CloseOnDone))
		_, err := r.CompileModule(ctx, code)
		return struct{}{}, func() { _ = r.Close(ctx) }, err
	}
	_, release, err := compile(experimental.WithCompilationWorkers(ctx, max(req.Workers, 1)), code, cache)
	if err != nil {
		fmt.Fprint(os.Stderr, err.Error())
		return childRefused
	}
	release()
	if err := storeStubOf(ctx, max(req.Workers, 1), req.Dir, code, compile); err != nil {
		fmt.Fprintf(os.Stderr, "storing the stub: %v\n", err)
		return childFailed
	}
	return childOK
}

// compileBudget is the budget of one compile child.
type compileBudget struct {
	timeout time.Duration
	memory  uint64
	workers int
}

// childSlots bounds how many compile children run at once (each may use
// its memory budget).
var childSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))

// executable is the binary compile children run: this process's own
// (/proc/self/exe on linux, which stays this binary even if its file was
// replaced since, as in an upgrade), else os.Executable.
var executable = sync.OnceValues(func() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
})

// compileInChild compiles code (with close-on-context-done as closeOnDone)
// in a child process that leaves the compiled code and the stub of code
// in dir (loadcache.go's layout). It returns an error wrapping ErrCompile:
// with wazero's message when wazero refused the module, with
// ErrCompileBudget when the child was stopped over its budget.
func compileInChild(ctx context.Context, code []byte, dir string, closeOnDone bool, b compileBudget) error {
	exe, err := executable()
	if err != nil {
		return fmt.Errorf("cannot start the compiler process: %w", err)
	}
	select {
	case childSlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-childSlots }()
	// CPU time: the wall budget on every worker, at least a second.
	cpu := uint64(max(b.timeout.Seconds()*float64(max(b.workers, 1)), 1))
	req, _ := json.Marshal(childRequest{Dir: dir, CloseOnDone: closeOnDone, Workers: b.workers, Memory: b.memory, CPUSeconds: cpu})
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe)
	cmd.Args = []string{"tollgate-wasm-compiler"} // what ps shows for it
	cmd.Env = append(os.Environ(), compileChildEnv+"="+string(req), "GOTRACEBACK=none")
	cmd.Stdin = bytes.NewReader(code)
	var stderr tailBuffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	diesWithParent(cmd)
	// The parent-death signal follows the thread that started the child:
	// this goroutine keeps its thread (which so never exits) until Wait.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	err = cmd.Run()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(stderr.String())
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("compiling the module: %w", ctx.Err())
	case cctx.Err() != nil:
		return fmt.Errorf("%w: %w: compiling the module took more than %s; killed", ErrCompile, ErrCompileBudget, b.timeout)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return fmt.Errorf("cannot start the compiler process %s: %w", exe, err)
	}
	switch {
	case exit.ExitCode() == childRefused:
		return CompileError(code, errors.New(msg))
	case exit.ExitCode() == childFailed:
		return fmt.Errorf("%w: the compiler process failed: %s", ErrCompile, msg)
	case outOfMemory(msg):
		return fmt.Errorf("%w: %w: compiling the module needed more than %d MiB; stopped", ErrCompile, ErrCompileBudget, b.memory>>20)
	case exit.ProcessState.UserTime()+exit.ProcessState.SystemTime() >= time.Duration(cpu)*time.Second:
		return fmt.Errorf("%w: %w: compiling the module used more than %ds of CPU time; killed", ErrCompile, ErrCompileBudget, cpu)
	}
	return fmt.Errorf("%w: the compiler process failed after %s (%v): %s", ErrCompile, time.Since(start).Round(time.Millisecond), err, firstLines(msg, 3))
}

// outOfMemory reports whether a child's stderr says it ran out of memory
// (the Go runtime's fatal error, or a failed mmap of wazero's).
func outOfMemory(msg string) bool {
	return strings.Contains(msg, "out of memory") || strings.Contains(msg, "cannot allocate memory")
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// tailBuffer keeps the first 4 KiB written to it (a child's message comes
// first; a Go runtime crash may follow it with much more).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := 4096 - len(t.buf); room > 0 {
		t.buf = append(t.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// vmSize is the process's address space now (VmSize), in bytes, or 0.
func vmSize() uint64 { return procKB("/proc/self/status", "VmSize:") }

// procKB is the value in kB of the line starting with key in a /proc file
// (/proc/self/status, /proc/meminfo), in bytes, or 0.
func procKB(file, key string) uint64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// ErrMemoryBudget is wrapped by the error of a Compile or NewPool that
// found the engine's memory budget (Config.MemoryBudgetBytes) exceeded.
var ErrMemoryBudget = errors.New("the memory budget of loaded modules is exhausted")

// DefaultMemoryBudget is Config.MemoryBudgetBytes when it is zero: three
// quarters of the memory limit of the process's cgroup (v2 memory.max, or
// v1 memory.limit_in_bytes), else of the machine's memory, else 8 GiB.
// The rest is for requests, the Go heap and the compiles.
func DefaultMemoryBudget() uint64 {
	limit := cgroupMemoryLimit()
	if limit == 0 {
		limit = machineMemory()
	}
	if limit == 0 {
		return 8 << 30
	}
	return limit / 4 * 3
}

// cgroupMemoryLimit is the memory limit of the cgroup the process is in,
// or 0 when there is none (or it cannot be read).
func cgroupMemoryLimit() uint64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			file = "/sys/fs/cgroup" + parts[2] + "/memory.max"
			if _, err := os.Stat(file); err != nil {
				file = "/sys/fs/cgroup/memory.max" // a cgroup namespace
			}
		case strings.Contains(","+parts[1]+",", ",memory,"): // v1
			file = "/sys/fs/cgroup/memory" + parts[2] + "/memory.limit_in_bytes"
			if _, err := os.Stat(file); err != nil {
				file = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
			}
		default:
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v >= 1<<60 { // "max", or v1's "unlimited" (a huge number)
			continue
		}
		return v
	}
	return 0
}

// machineMemory is MemTotal of /proc/meminfo, or 0.
func machineMemory() uint64 { return procKB("/proc/meminfo", "MemTotal:") }

// checkBudget fails when what the engine holds exceeds its memory budget.
func (e *Engine) checkBudget() error {
	if used := e.used.Load(); used > 0 && uint64(used) > e.budget {
		return fmt.Errorf("%w: compiled modules and instances would use %d MiB with this one; the budget is %d MiB", ErrMemoryBudget, used>>20, e.budget>>20)
	}
	return nil
}

// Reserve counts n bytes against the engine's memory budget for modules the
// engine does not compile itself (a WASI command, a Rego module: their
// machine code and the linear memory of the instances they keep), as
// Compile and NewPool count a waPC module's. When the total would exceed the
// budget it counts nothing and fails with ErrMemoryBudget and the reason.
// release gives the bytes back; calling it again does nothing.
func (e *Engine) Reserve(n int64) (release func(), err error) {
	e.used.Add(n)
	if err := e.checkBudget(); err != nil {
		e.used.Add(-n)
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { e.used.Add(-n) }) }, nil
}

// EstimatedCodeBytes is the machine code wazero makes of a module of n bytes
// when it cannot be measured: about twice the module's size.
func EstimatedCodeBytes(n int) int64 { return 2 * int64(n) }

// MemoryBytes is what counts against the engine's memory budget now: the
// machine code of its compiled modules, the linear memory of their pools'
// live instances and what Reserve counted.
func (e *Engine) MemoryBytes() int64 { return e.used.Load() }

// MemoryBudget is the engine's memory budget, in bytes.
func (e *Engine) MemoryBudget() uint64 { return e.budget }
