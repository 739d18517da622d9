// Package wasi runs WASI-command policies (Kubewarden's `executionMode: wasi`,
// standard Go built with GOOS=wasip1): one instance per invocation, `_start`
// with the given argv, a stdin document, stdout and stderr captured, the exit
// code reported. The `host`.`call` import (also `kubewarden:javy/host`.`call`)
// answers through a host-call handler, appending the answer (or the error
// text) to the module's stdin, as Kubewarden's policy-evaluator does.
//
// Compiled modules use the compilation cache given to Compile (host/wasm's).
// Every invocation is bounded by a deadline (wazero's close-on-context-done; a
// guest's sleep ends at the deadline too), a linear-memory cap and an output
// cap. Instances may be started ahead of
// demand for one argv: `_start` runs (Go runtime start, package init) until
// the guest first reads stdin or calls the host, and the invocation that takes
// the instance continues it from there with its stdin. What the guest sees is
// the same argv, stdin and host answers as a fresh instance would.
//
// Evaluator (evaluator.go) is the wasi execution mode of a policy, an
// eval.Evaluator (host/policy/eval) that host/policy builds: it runs the
// command with Kubewarden's argv (validate, validate-settings) and turns a
// non-zero exit into a rejection (or invalid settings) with stderr as the
// message, as Kubewarden's policy-evaluator does.
//
// This package must not know about HTTP, Kubernetes, admission or the other
// execution modes; apart from evaluator.go it moves bytes in and out of
// commands and classifies failures with host/wasm's sentinel errors.
package wasi
