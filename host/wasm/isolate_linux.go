package wasm

import "syscall"

// limitSelf bounds the compile child: its address space to what it has
// mapped now plus memory bytes (the Go runtime reserves over a GiB of
// address space it never touches before anything runs), and its CPU time
// to cpuSeconds (SIGKILL a second after, Go ignores the SIGXCPU before it).
func limitSelf(memory, cpuSeconds uint64) error {
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
