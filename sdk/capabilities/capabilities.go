package capabilities

import (
	"errors"
	"fmt"
	"strings"
)

// Binding is the waPC binding of every Kubewarden host capability.
const Binding = "kubewarden"

// CallFunc makes one host call and returns the host's answer, or an error
// carrying the host's error text. guest.HostCall, wasi.HostCall and
// wapc-guest-tinygo's wapc.HostCall have this signature.
type CallFunc func(binding, namespace, operation string, payload []byte) ([]byte, error)

// Host makes host-capability calls through Call.
type Host struct {
	Call CallFunc
}

// ErrNoCall is returned by every helper of a Host whose Call is nil.
var ErrNoCall = errors.New("capabilities: Host.Call is nil")

// CallError is the error of a host call the host answered with an error (or
// whose answer did not decode). Capability is "<namespace>/<operation>";
// Err is the transport's error, whose text is the host's.
type CallError struct {
	Capability string
	Err        error
}

func (e *CallError) Error() string { return e.Capability + ": " + e.Err.Error() }

func (e *CallError) Unwrap() error { return e.Err }

// call sends payload to namespace/operation.
func (h Host) call(namespace, operation string, payload []byte) ([]byte, error) {
	if h.Call == nil {
		return nil, ErrNoCall
	}
	answer, err := h.Call(Binding, namespace, operation, payload)
	if err != nil {
		return nil, &CallError{Capability: namespace + "/" + operation, Err: err}
	}
	return answer, nil
}

// decodeError wraps an answer that did not decode.
func decodeError(namespace, operation string, err error) error {
	return &CallError{Capability: namespace + "/" + operation, Err: fmt.Errorf("cannot decode the host's answer: %w", err)}
}

// IsNotFound reports whether err is the host's answer to a get_resource of an
// object that does not exist: Kubewarden answers an error (never null) whose
// text is "Cannot find <apiVersion>/<Kind> named '<name>' inside of namespace
// ...", and policies decide on it.
func IsNotFound(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Cannot find ") && strings.Contains(msg, " named '")
}

// IsAccessDenied reports whether err is the host's refusal of a kind the
// policy did not declare in contextAwareResources or a capability outside
// its hostCapabilities ("Policy has not been granted access to ...").
func IsAccessDenied(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Policy has not been granted access to ")
}
