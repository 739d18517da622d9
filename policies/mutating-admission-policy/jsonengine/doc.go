// Package jsonengine evaluates one Kubernetes MutatingAdmissionPolicy on
// admission requests as JSON objects (unstructured content), with no typed
// Kubernetes objects: it builds with TinyGo (issue 31), against the
// build-time patches of scripts/tinygo-patches, as well as with standard Go.
//
// It owns: decoding the settings (the same format as package engine), the
// CEL environment (the apiserver's stored-expressions environment declared
// here: the base libraries, the admission variables and their declared
// types, the composited variables, the Object and JSONPatch types),
// matching (rules, selectors, match conditions), parameter selection,
// failurePolicy, the JSONPatch and ApplyConfiguration patchers (the latter
// on structured-merge-diff with client-go's built-in schema, serialized at
// build time in smd_schema.json), and what typed objects do implicitly
// (typed.go, from typed_kinds.json: zero values, omitempty, unknown fields,
// canonical quantities and times), the CEL authorizer (authz.go: the
// apiserver's authz libraries re-declared; rbac.go: the settings' RBAC
// objects and package engine's authorizer chain on them), each following the
// apiserver's code (k8s.io/apiserver v0.36.6) that package engine links. The
// library cost estimator is the apiserver's.
//
// fromCluster settings: the guest gives the engine a Cluster (cluster.go:
// namespaces, params and the authorizer's decisions through the host
// capabilities, asked as package engine's guest asks them). The format
// library is declared here (format.go), its validators without package net.
// Equivalent-resource matching (matchPolicy Equivalent across API versions)
// is not done, as in package engine.
//
// It must NOT import k8s.io/api, apimachinery's typed machinery or anything
// that imports net or net/http (TinyGo's wasip1 root has neither), nor know
// about Wasm or the host: cmd/tinygo wraps it as a waPC guest.
package jsonengine
