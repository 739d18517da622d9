// Command gatekeeper-mutation is tollgate's built-in Gatekeeper mutation
// policy (builtin://gatekeeper-mutation): a mutating Kubewarden waPC policy,
// built with TinyGo, that applies OPA Gatekeeper mutators (Assign,
// AssignMetadata, ModifySet, AssignImage) given in its settings with
// Gatekeeper's semantics. The logic is in package engine; this file and
// guest.go only speak the waPC protocol.
package main

import wapc "github.com/wapc/wapc-guest-tinygo"

func main() {
	wapc.RegisterFunctions(wapc.Functions{
		"validate":          validate,
		"validate_settings": validateSettings,
		"protocol_version":  func([]byte) ([]byte, error) { return []byte(`"v1"`), nil },
	})
}
