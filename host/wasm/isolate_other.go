//go:build !linux

package wasm

import "os/exec"

// limitSelf bounds nothing where the engine has no rlimits to set: the
// parent's wall deadline still stops the compile.
func limitSelf(memory, cpuSeconds uint64) error { return nil }

// diesWithParent does nothing where there is no parent-death signal: the
// child ends at its compile deadline.
func diesWithParent(cmd *exec.Cmd) {}
