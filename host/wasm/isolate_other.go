//go:build !linux

package wasm

// limitSelf bounds nothing where the engine has no rlimits to set: the
// parent's wall deadline still stops the compile.
func limitSelf(memory, cpuSeconds uint64) error { return nil }
