// Package wasi is the guest side of Kubewarden's WASI execution mode
// (`executionMode: wasi`) for policies built with standard Go as commands:
//
//	GOOS=wasip1 GOARCH=wasm go build -o policy.wasm .
//
// The host runs `_start` once per evaluation with argv
// ["policy.wasm", "validate"] or ["policy.wasm", "validate-settings"], the
// document on stdin ({"request": R, "settings": S} or the settings), and
// reads the answer from stdout: a ValidationResponse or a
// SettingsValidationResponse. A non-zero exit is a rejection (code 500)
// whose message is stderr. Main does all of it; HostCall reaches the host
// capabilities through the `host`.`call` import, the answer arriving on stdin.
package wasi
