// Package protocol holds the wire types exchanged between the tollgate host and a
// policy over waPC: the ValidationRequest sent to the guest's `validate`
// operation, the ValidationResponse it answers with, and the
// SettingsValidationResponse of `validate_settings`.
//
// The types are Kubewarden's (policy-sdk-go and policy-server agree on them), so
// policies written for Kubewarden run unchanged. This package depends on the
// standard library only: it is imported by the host and by guests built with
// standard Go or TinyGo alike. It must not know about Wasm, HTTP or any engine.
package protocol
