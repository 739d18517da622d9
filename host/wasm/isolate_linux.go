package wasm

import (
	"os"
	"os/exec"
	"syscall"
)

// limitSelf bounds the compile child: its address space to what it has
// mapped now plus memory bytes (the Go runtime reserves over a GiB of
// address space it never touches before anything runs), and its CPU time
// to cpuSeconds (SIGKILL a second after, Go ignores the SIGXCPU before it).
// It also makes itself the kernel OOM killer's first choice
// (oom_score_adj 1000, which any process may raise): when the container's
// memory runs out during a compile, the compile dies, not the server.
func limitSelf(memory, cpuSeconds uint64) error {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	if memory > 0 {
		as := vmSize() + memory
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
			return err
		}
	}
	if cpuSeconds > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpuSeconds, Max: cpuSeconds + 1}); err != nil {
			return err
		}
	}
	return nil
}

// diesWithParent makes the compile child cmd get SIGKILL when the server
// that started it dies (kill -9, the kernel's OOM killer, a crash): without
// it an orphaned compile runs on for up to --compile-timeout, with up to
// --compile-memory-limit, outside any container that would reap it. The
// kernel sends the signal when the parent *thread* ends, so the caller
// keeps its goroutine on one thread until the child is waited for
// (runtime.LockOSThread in compileInChild); Go's fork checks for a parent
// already gone.
func diesWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
