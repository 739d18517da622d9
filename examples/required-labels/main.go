// Command required-labels is a validating Kubewarden policy for any kind of resource: it checks
// the labels of the object against mandatory, denied and constrained (regular expression) labels
// given in its settings. See README.md for the settings and messages.
package main

import (
	// Registers the protocol_version operation that kwctl/tollgate annotate ask for.
	_ "github.com/kubewarden/policy-sdk-go/protocol"
	wapc "github.com/wapc/wapc-guest-tinygo"
)

func main() {
	wapc.RegisterFunctions(wapc.Functions{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}
