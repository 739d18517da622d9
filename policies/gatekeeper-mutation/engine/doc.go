// Package engine applies OPA Gatekeeper mutators (Assign, AssignMetadata,
// ModifySet, AssignImage; API group mutations.gatekeeper.sh) to admission
// request objects with Gatekeeper's semantics (the reference is
// github.com/open-policy-agent/gatekeeper/v3 v3.23.1, pkg/mutation and
// pkg/webhook/mutation.go).
//
// It compiles with both TinyGo and standard Go: no reflection-based
// encoding/json, no fmt-heavy paths in the request hot path, no goroutines.
// The guest in the parent package (policies/gatekeeper-mutation) wraps it as a
// waPC policy; tests and tollgate's scaffold command call it natively.
//
// # API (stable: test/gkdiff calls it)
//
//	// Compile decodes and validates the settings
//	//   {"mutators": [<mutator objects, YAML-as-JSON, any served apiVersion>],
//	//    "namespaces": [<Namespace objects>], "fromCluster": false}
//	// with everything the apiserver (CRD schema: required fields, enums,
//	// patterns, defaults) and Gatekeeper's constructors would refuse. An error
//	// wraps ErrSettings and names the mutator (kind/name) and the field.
//	func Compile(settings []byte) (*System, error)
//
//	// Request is one admission request, as the webhook sees it.
//	type Request struct {
//		Operation string // CREATE, UPDATE, DELETE, CONNECT
//		Kind      GVK    // the object's group/version/kind (request.kind)
//		Name      string // request.name
//		Namespace string // request.namespace
//		Username  string // request.userInfo.username
//		Object    []byte // request.object, JSON
//		OldObject []byte // request.oldObject, JSON (may be nil)
//		Cluster   NamespaceGetter // reads the request's Namespace (fromCluster settings)
//		Parsed    *jsonv.Value    // Object already parsed (optional)
//	}
//	type GVK struct{ Group, Version, Kind string }
//
//	// Mutate applies the system to req with Gatekeeper's webhook rules.
//	// changed=false: the object is left as it is (mutated is nil).
//	// changed=true: mutated is the whole mutated object as JSON (key order
//	// is not significant: compare as JSON values).
//	// err: the request must be rejected with err.Error() (an object whose
//	// shape does not fit a location, a mutator set that does not converge
//	// (wraps ErrNotConverging), an invalid label selector, bad JSON).
//	func (s *System) Mutate(req Request) (mutated []byte, changed bool, err error)
//
//	// IDs lists the compiled mutators as "Kind/name" in application order.
//	func (s *System) IDs() []string
//
// # Numbers, as Gatekeeper holds them
//
// The request object is decoded like Gatekeeper's webhook does
// (unstructured JSON: an integer literal that fits int64 is an int64,
// anything else float64). A mutator is typed as Gatekeeper's controller holds
// it after reading it back from the apiserver: assign.value is decoded by
// encoding/json (every number float64, so `1` never equals an int64 1 of the
// object under go-cmp, and an integer list key never matches an assigned
// object's key), while ModifySet's values.fromList keeps integers as int64
// (the apiserver re-encodes an integral float as an integer and the client
// decodes it as int64). The convergence loop compares with go-cmp's rules
// (int64 1 != float64 1); "changed" compares the final object with the
// request's as JSON values (what a JSON patch between them would carry).
//
// Subpackages follow Gatekeeper's split: jsonv (a reflection-free JSON tree,
// parser, lazy reader and encoder), path/token, path/parser, path/tester, match, mutators
// (assign, assignmeta, modifyset, assignimage sharing one setter), and this
// package's system loop.
//
// It must NOT know about Wasm, waPC, Kubewarden's wire types or the host.
package engine
