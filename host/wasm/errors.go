package wasm

import (
	"errors"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

var (
	// ErrNotWasm: the bytes are not a WebAssembly module.
	ErrNotWasm = wasmbin.ErrNotWasm
	// ErrNotWapc: the module does not export the waPC entry point __guest_call.
	ErrNotWapc = errors.New("module is not a waPC guest (no __guest_call export)")
	// ErrCompile: wazero could not compile the module.
	ErrCompile = errors.New("module does not compile")
	// ErrInstantiate: the module could not be instantiated or its start functions failed.
	ErrInstantiate = errors.New("module does not instantiate")
	// ErrTrap: the guest trapped (unreachable, out-of-bounds access, a Go panic, a non-zero exit...).
	// The instance is discarded.
	ErrTrap = errors.New("policy trapped")
	// ErrTimeout: the call ran past its deadline and was stopped. The instance is discarded.
	ErrTimeout = errors.New("policy evaluation timed out")
	// ErrMemoryLimit: the guest tried to grow its linear memory past the cap. The instance is discarded.
	ErrMemoryLimit = errors.New("policy exceeded its memory limit")
	// ErrGuest: the guest answered the call with a waPC error (the instance stays usable).
	ErrGuest = errors.New("policy returned an error")
	// ErrHostCall: a host call failed.
	ErrHostCall = errors.New("host call failed")
	// ErrClosed: the pool or module was closed.
	ErrClosed = errors.New("policy runtime closed")
)
