// Package mapdiff is the differential suite of the built-in
// mutating-admission-policy module: every case runs through Kubernetes' own
// MutatingAdmissionPolicy admission plugin (k8s.io/apiserver v0.36.6: its
// policy source and informers, generic dispatcher, matcher, parameter
// selection, mutating dispatcher and patchers, with the type converters made
// from the OpenAPI v3 documents of a real apiserver in client-go's
// openapitest) and through the Wasm module loaded by tollgate's host, and the
// outcomes must be equal byte for byte after normalization (JSON re-encoded
// with sorted keys, without null-valued keys and without the top-level
// apiVersion and kind, which the apiserver's typed objects lose in conversions).
// The patch the host builds from the module's answer is compared too, byte
// for byte, with the one the host's diff builds from the request's object to
// the plugin's result as the apiserver encodes it (referencePatch says how,
// and why its null members follow the request's): normalized objects cannot
// see a null member removed or added (nulls_test.go).
//
// The reference defaults the policy and the binding with Kubernetes' own
// defaulting (reference_test.go, apiDefaults), not the engine's: tried on
// 2026-12-02, the engine's failurePolicy default set to Ignore (policy.wasm
// rebuilt) made TestDifferential fail ("the module and Kubernetes differ").
//
// Cases using CEL's authorizer (authz_test.go) give the reference a table
// authorizer that allows exactly what the settings' RBAC objects allow; the
// RBAC decisions themselves are compared with Kubernetes' in test/rbacdiff.
//
// The module is policies/mutating-admission-policy/policy.wasm, built by
// `make policies`; the suite fails (it does not skip) when it is missing.
package mapdiff
