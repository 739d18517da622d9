// Command raw-validation is a raw Kubewarden policy (policyType: raw): it validates any JSON
// document, here an access request {"user": ..., "action": ..., "resource": ...}, against the
// users and actions its settings allow. See README.md.
//
// It is built as a TinyGo wasi-legacy module (build kind tinygo-wasi-legacy), whose _start
// registers the waPC functions and returns without exiting.
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
