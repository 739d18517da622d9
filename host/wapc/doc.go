// Package wapc is the kubewarden-wapc execution mode of a policy (and of the
// built-in modules, which are waPC modules): an eval.Evaluator over a module
// compiled by host/wasm and a pool of its instances, the policy's own or one
// shared with the policies of the same module digest, memory limit, pool
// size and share group (Host). Each call carries the policy's deadline and
// host-call handler; the request and answer are Kubewarden's wire protocol
// (host/policy/eval).
//
// host/policy selects the mode and builds the evaluator through Host.Load.
// This package must not know about HTTP, policies.yml, server semantics or
// the other execution modes; how instances are compiled, pooled, bounded
// and recycled is host/wasm's.
package wapc
