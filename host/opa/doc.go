// Package opa runs modules built by `opa build -t wasm` (the OPA Wasm ABI
// 1.x) on wazero: Kubewarden's `executionMode: opa` and `gatekeeper`
// policies. It checks the module's ABI version, refuses a module whose
// `builtins()` names a builtin this package does not implement (listing all
// of them), loads the data document once per instance, and evaluates
// entrypoint 0 with the one-call `opa_eval` when the module has it (ABI 1.2
// and later), the eval-context calls otherwise.
//
// Instances are pooled and reused: after an evaluation the heap pointer goes
// back to where it was once the data was loaded, so the next evaluation
// starts on a clean heap. An instance that trapped, aborted or ran past its
// deadline is discarded. Every evaluation is bounded by a deadline (the
// module is instrumented by host/wasm/wasmbin with an interrupt check), a
// linear-memory cap and an output cap. Compiled code goes to the compilation
// cache given to Compile (host/wasm's).
//
// Builtins the module leaves to the host (opa_builtin0..4) are OPA's own
// implementations (package topdown), under the names Kubewarden's host
// offers them, with Kubewarden's sprintf (every number argument converted to
// an integer).
//
// OPA and Gatekeeper (evaluator.go) are the opa and gatekeeper execution
// modes of a policy, each an eval.Evaluator (host/policy/eval) that
// host/policy builds: the input and the answer shaped as Kubewarden shapes
// them for the mode, over a Rego module runner they share, and,
// for a context-aware policy, the objects of the resources it is granted put
// in its data before each evaluation (cluster.go: data.kubernetes for opa,
// data.inventory for gatekeeper).
//
// This package must not know about HTTP, the Kubernetes API (objects come
// from host/capabilities), Kubewarden's waPC wire protocol or the other
// execution modes; apart from evaluator.go and cluster.go it moves JSON
// documents (input, data, result) in and out of a Rego module and
// classifies failures with host/wasm's sentinel errors.
package opa
