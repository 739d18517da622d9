package cluster

import "syscall"

// sysProcAttr makes the kernel kill etcd and kube-apiserver when the test process dies without
// calling Stop (a panic, a timeout's SIGQUIT), so no control plane outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
