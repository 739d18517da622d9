// Package module resolves a module URI to the bytes of a Wasm module: a plain
// path or file://, https:// (and http:// only when allowed), builtin:// (modules
// compiled into the tollgate binary) and registry:// (delegated to an OCI
// fetcher, see host/oci).
//
// It must not know how modules are compiled or run, nor anything of
// Kubernetes: it only fetches bytes and names where they came from.
package module
