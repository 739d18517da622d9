// Command mutating-admission-policy is tollgate's built-in policy that runs a
// Kubernetes MutatingAdmissionPolicy, unchanged, in the Wasm sandbox
// (builtin://mutating-admission-policy). It is a standard-Go waPC guest
// (GOOS=wasip1, -buildmode=c-shared): cel-go cannot run under TinyGo.
//
// The settings hold the policy, its binding, the candidate parameter objects
// and optionally Namespace objects (see README.md). validate_settings compiles
// every CEL expression; validate evaluates a request with the compiled policy,
// which is cached by the settings bytes so that nothing is compiled per request.
package main

import (
	// First: k8s.io/klog's init needs os.Args[0], which waPC hosts leave empty.
	_ "github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/argv0"

	"github.com/tollgate-dev/tollgate/sdk/guest"
)

func init() {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

func main() {}
