// Package engine evaluates one Kubernetes MutatingAdmissionPolicy (with its
// binding and candidate parameter objects) against admission requests, with
// the semantics of the Kubernetes apiserver.
//
// It owns: decoding and validating the policy settings (policy, binding,
// params, namespaces), compiling every CEL expression once, and evaluating a
// request into "unchanged", "mutated object" or "rejected with the apiserver's
// message".
//
// To be exact rather than similar, the evaluation is delegated to the
// apiserver's own packages (k8s.io/apiserver, imported as a library): the CEL
// environment, the mutating-policy dispatcher (matching, parameter selection,
// failurePolicy, error messages) and the JSONPatch / ApplyConfiguration
// patchers. This package supplies what a cluster would: an in-memory
// parameter store, a namespace lister, the compiled-in OpenAPI schemas of the
// built-in types, and an authorizer.
//
// It must NOT know about Wasm, waPC or the host: the guest in the parent
// package wraps it, and it runs natively in tests and benchmarks.
package engine
