// Package engine evaluates one Kubernetes MutatingAdmissionPolicy (with its
// binding and candidate parameter objects) against admission requests, with
// the semantics of the Kubernetes apiserver.
//
// It owns: decoding and validating the policy settings (policy, binding,
// params, namespaces, rbac), compiling every CEL expression once, and evaluating a
// request into "unchanged", "mutated object" or "rejected with the apiserver's
// message".
//
// To be exact rather than similar, compiling and patching are delegated to
// the apiserver's own packages (k8s.io/apiserver v0.36.6, imported as a
// library): the CEL environment, the composited compiler, match conditions
// and the JSONPatch / ApplyConfiguration patchers. The dispatch (matching,
// parameter selection, failurePolicy, error messages) follows the apiserver's
// generic and mutating dispatchers, which cannot be linked (they pull in
// client-go's clientset); test/mapdiff checks it against them. This package
// supplies what a cluster would: the parameter objects, the namespaces, the
// built-in schemas (client-go's, pre-decoded) and an authorizer (the
// apiserver's chain: system:masters, then RBAC over the settings' rbac objects,
// with ClusterRole aggregation applied).
//
// Each request is evaluated first on a fast path (fasteval.go: a lazy CEL
// activation, fastApply, applyJSONPatchOps, conversions through the typed
// JSON encoding) that uses the same compiled programs and vouches only for
// successful outcomes it reproduces exactly; anything else, errors
// included, is redone on the apiserver's code above (see RATIONALE.md).
//
// It must NOT know about Wasm, waPC or the host: the guest in the parent
// package wraps it, and it runs natively in tests and benchmarks.
package engine
