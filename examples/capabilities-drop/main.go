// Command capabilities-drop is a mutating Kubewarden policy: every container of a Pod that adds
// Linux capabilities gets "BPF" added to securityContext.capabilities.drop. Pods whose containers
// add no capabilities, and objects that are not Pods, are accepted unchanged.
//
// Build (exactly as Kubewarden builds its policies):
//
//	tinygo build -o policy.wasm -target=wasi -no-debug .
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
