// Package policy is a loaded policy: a compiled module, its Kubewarden
// metadata, its validated settings and a pool of instances; Evaluate runs one
// request through it and returns the policy's answer with the JSONPatch of any
// mutation.
//
// It knows the Kubewarden wire protocol (sdk/protocol) and the host
// capabilities a policy may call. It must not know about HTTP, policies.yml,
// monitor mode or other server-level semantics: those belong to the caller.
package policy
