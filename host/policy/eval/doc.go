// Package eval is the contract between host/policy and the execution modes
// a policy runs in: the Evaluator a loaded policy holds exactly one of, the
// Config every mode is built from, the Request and the Result. Each mode
// implements Evaluator in its own package: kubewarden-wapc in host/wapc,
// wasi in host/wasi, opa and gatekeeper in host/opa (the built-in modules
// are waPC modules). host/policy selects the mode and builds the mode's
// evaluator; the mode packages import this package, never host/policy, so
// that host/policy can import them without a cycle.
//
// It also holds Kubewarden's wire protocol that the waPC and WASI modes
// share (protocol.go, response.go): the ValidationRequest payload, the
// ValidationResponse decoded and its mutated_object diffed into a JSONPatch,
// the settings validation answer.
//
// This package must not know how any mode runs a module (wazero, pools,
// WASI, OPA's ABI), nor HTTP, policies.yml or server semantics.
package eval
