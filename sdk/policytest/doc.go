// Package policytest helps unit test policies natively (with `go test`, no
// Wasm): it builds the ValidationRequest payload of `validate` from an
// AdmissionRequest or AdmissionReview (a fixture file or a value) and
// settings, runs the policy's operations in-process through package guest,
// decodes the ValidationResponse and SettingsValidationResponse, and fakes
// the host's side of host calls: it records the policy's log records and
// answers host capabilities from handlers, canned answers (Host.Answer,
// Host.Fail: a request compared as a JSON value, as the host compares it)
// or a kwctl session file (Host.ReplaySession, the format of
// `--record-host-capabilities-interactions`, read by a small YAML reader of
// its own so that the SDK keeps no dependencies).
//
// It is the counterpart of policy-sdk-go's testing package. Only the native
// build has it. It must not know about Wasm engines or the tollgate host:
// tests that run the built policy.wasm belong to the host's test suites.
package policytest
