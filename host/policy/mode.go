package policy

import (
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// SelectMode decides how a module runs, as kwctl does: the metadata's
// executionMode, which a requested mode (run/bench -e) must not contradict;
// without metadata the requested mode; with neither, kubewarden-wapc, unless
// the module is a Rego one (an export named opa_*), which needs a mode. A
// Rego module must run in a Rego mode (opa, gatekeeper) and only a Rego
// module may.
func SelectMode(md *metadata.Metadata, requested string, module []byte) (string, error) {
	switch requested {
	case "", metadata.ExecutionModeWapc, metadata.ExecutionModeWasi, metadata.ExecutionModeOPA, metadata.ExecutionModeGatekeeper:
	default:
		return "", fmt.Errorf("unknown execution mode %q (want kubewarden-wapc, wasi, opa or gatekeeper)", requested)
	}
	rego := isRego(module)
	var mode string
	switch {
	case md != nil:
		mode = md.Mode()
		if requested != "" && requested != mode {
			return "", fmt.Errorf("the policy execution mode specified via CLI flag (%s) is different from the one reported inside of the policy's metadata (%s)", requested, mode)
		}
		if rego && !isRegoMode(mode) {
			return "", fmt.Errorf("wrong value inside of the policy's metadata for 'executionMode': the policy has been built with a Rego-based framework, but its executionMode is %s (want opa or gatekeeper)", mode)
		}
		if !rego && isRegoMode(mode) {
			return "", fmt.Errorf("wrong value inside of the policy's metadata for 'executionMode': it is %s, but the policy has not been built with a Rego-based framework", mode)
		}
	case requested != "":
		mode = requested
		if rego && !isRegoMode(mode) {
			return "", fmt.Errorf("the policy has been built with a Rego-based framework, but the execution mode specified via CLI flag is %s (want opa or gatekeeper)", mode)
		}
		if !rego && isRegoMode(mode) {
			return "", fmt.Errorf("the execution mode specified via CLI flag is %s, but the policy has not been built with a Rego-based framework", mode)
		}
	case rego:
		return "", fmt.Errorf("the policy has been built with a Rego-based framework and has no metadata: give the execution mode (-e opa or -e gatekeeper), or annotate the module")
	default:
		mode = metadata.ExecutionModeWapc
	}
	return mode, nil
}

func isRegoMode(mode string) bool {
	return mode == metadata.ExecutionModeOPA || mode == metadata.ExecutionModeGatekeeper
}

// isRego reports whether a module was built by OPA (an export named opa_*).
// A module that cannot be read is not: compiling it reports the problem.
func isRego(module []byte) bool {
	exports, err := wasmbin.Exports(module)
	if err != nil {
		return false
	}
	for _, e := range exports {
		if strings.HasPrefix(e.Name, "opa_") {
			return true
		}
	}
	return false
}
