// Package guest is the waPC guest ABI for policies built with standard Go
// (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared, Go 1.24 or newer).
//
// A policy registers its operations from init() with RegisterFunctions and
// leaves main empty; the module exports __guest_call through //go:wasmexport
// and imports the waPC host functions (module "wapc") through //go:wasmimport.
// HostCall and ConsoleLog reach the host. A Function that returns an error or
// panics answers the host with a guest error (never a trap); an operation
// that was not registered answers a guest error naming it.
//
// Built for any other target (the native build), the same API runs in-process
// so that policies can be unit tested with `go test`: Invoke calls a
// registered operation exactly as __guest_call would, SetHostCallHandler
// answers HostCall, and SetConsoleLogger receives ConsoleLog.
//
// This package owns only the waPC calling convention. It must not know about
// Kubewarden, Kubernetes, JSON or any payload format, nor about the host
// (wazero, wapc-go): payloads are opaque bytes.
package guest
