// Package enginecmp runs the same waPC policy modules on the same requests on
// several engines side by side (issue 15, item 4), to tell what tollgate's
// host costs on top of the engine it is built on, and how that engine compares
// with wasmtime, the engine Kubewarden runs policies on:
//
//   - wazero: plain wazero (compiler) through wapc-go, with only what these
//     modules need to run at all (WASI with a proc_exit that does not close the
//     instance, `_initialize`/`_start` called once); no interrupt check, no
//     close-on-context-done, no memory cap, no pool, no deadline;
//   - tollgate-guest: host/wasm's pool call (the instrumented module, the
//     deadline, the memory cap, the copy of the answer), the guest call alone;
//   - tollgate: host/policy's Evaluate (the guest call plus the
//     ValidationRequest encoding, the answer's decoding and the JSONPatch diff);
//   - wasmtime: wasmtime (Cranelift, through wasmtime-go's C API) with
//     epoch interruption compiled in as Kubewarden configures it, one instance
//     reused for every request;
//   - wasmtime-fresh: the same with a fresh store and instance per request,
//     instantiated from the precompiled module and started (`_start` or
//     `_initialize`, `wapc_init`) before the call: what Kubewarden's
//     policy-server does for every evaluation.
//
// The waPC host protocol on wasmtime is implemented here (wasmtime.go). Every
// engine must answer byte for byte the same ValidationResponse
// (TestSameResponse); benchmarks per module and engine are in
// BenchmarkEngines, and `go run ./cmd/enginecmp` prints the p50 of each engine,
// measured in interleaved rounds, and their ratios.
//
// This is a test-only module (it links libwasmtime through cgo), so that
// tollgate itself never depends on wasmtime.
package enginecmp
