// Package wasm runs waPC guest modules on wazero (compiler engine) through
// wapc-go: it compiles modules (with wazero's on-disk compilation cache, and a
// load cache that starts an instrumented module from a stub of it, see
// loadcache.go), keeps pools of instances, and bounds every call with a
// deadline and a linear-memory cap. The deadline is enforced by an interrupt check compiled into each
// module (wasmbin.Instrument), and by wazero's close-on-context-done for a
// module that cannot be instrumented. A pool instance's linear memory is
// mapped outside the Go heap (memory.go; on linux), and an instance that one
// call grew by more than PoolConfig.RecycleGrowth is replaced after it, so
// that the memory a large request took leaves the process.
//
// A module is read before it is compiled and refused over the structural
// limits of Config.Limits (wasmbin.CheckLimitsAndSelect, in Screen); one that is not
// in the load cache is compiled in a child process of the running binary
// with a time and memory budget (isolate.go: this package's init runs the
// compile when the process was started as such a child); the start
// functions of an instance run under PoolConfig.StartTimeout; and the
// machine code and instance memory the engine holds are bounded by
// Config.MemoryBudgetBytes.
//
// It owns the three kinds of module found in the Kubewarden ecosystem: TinyGo
// `-target=wasi` commands (whose `_start` ends in proc_exit(0)), TinyGo
// `wasi-legacy` modules, and standard-Go `wasip1` reactors that need
// `_initialize`. Guests get WASI with nothing mounted: no files, no network, no
// environment.
//
// It also owns the engine's WebAssembly features for every execution mode
// (features.go: CoreFeatures, NewRuntimeConfig, Screen, CompileError), which
// host/wasi and host/opa use too.
//
// This package must not know about Kubernetes, admission, Kubewarden's wire
// types or policy settings: it moves bytes in and out of guests and classifies
// failures (ErrTrap, ErrTimeout, ErrMemoryLimit).
package wasm
