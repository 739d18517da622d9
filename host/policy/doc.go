// Package policy is a loaded policy: a module, its Kubewarden metadata, its
// validated settings and the evaluator of its execution mode; Evaluate runs
// one request through it and returns the policy's answer with the JSONPatch
// of any mutation.
//
// Load selects the execution mode (SelectMode) and builds that mode's
// eval.Evaluator (host/policy/eval), each mode in its own package:
// kubewarden-wapc and the built-in modules in host/wapc, wasi in host/wasi,
// opa and gatekeeper in host/opa. This package imports them; they import
// host/policy/eval, never this package. A Policy holds one evaluator and
// knows no mode's internals: the modes differ only behind the interface.
//
// It owns what every mode shares: the settings' normalization, the host-call
// handler (guest logging, then Spec.HostCalls), the guest log's limits, the
// heap trimmed after loads. It must not know about HTTP, policies.yml,
// monitor mode or other server-level semantics: those belong to the caller.
package policy
