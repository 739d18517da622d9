package kubelet

import "syscall"

// sysProcAttr makes the kernel kill a policy server when the test process dies without stopping
// it (a panic, a timeout's SIGQUIT), so no server outlives its test. Linux only, like the e2e
// tests.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
