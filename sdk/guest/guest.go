package guest

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// Function handles one waPC operation: it receives the payload the host sent
// and returns the response payload, or an error that the host receives as a
// guest error.
//
// The payload is only valid until the Function returns: the guest reuses its
// buffer for the next call. Copy what must outlive the call (json.Unmarshal
// already copies, including into json.RawMessage).
type Function func(payload []byte) ([]byte, error)

// ErrUnknownOperation is wrapped by the error answered for an operation that
// no Function was registered for.
var ErrUnknownOperation = errors.New("unknown operation")

// HostError is the error HostCall returns when the host answers a host call
// with an error. Message is the host's own text.
type HostError struct {
	Message string
}

func (e *HostError) Error() string { return "host error: " + e.Message }

// PanicError is the error answered for a Function that panicked. Value is
// what was passed to panic; Location is the function and file:line that
// panicked, when known.
type PanicError struct {
	Operation string
	Value     any
	Location  string
}

func (e *PanicError) Error() string {
	s := fmt.Sprintf("operation %q panicked: %v", e.Operation, e.Value)
	if e.Location != "" {
		s += " (at " + e.Location + ")"
	}
	return s
}

// functions holds the registered operations. It is written only by
// RegisterFunctions, which policies call from init(), before any call.
var functions = map[string]Function{}

// RegisterFunctions registers the operations a policy answers, by name (for
// a Kubewarden policy: "validate" and "validate_settings"). Call it from
// init(). A name registered again is replaced; a nil Function removes it.
func RegisterFunctions(fns map[string]Function) {
	for name, fn := range fns {
		if fn == nil {
			delete(functions, name)
			continue
		}
		functions[name] = fn
	}
}

// dispatch runs the Function registered for operation. It never panics: a
// panic in the Function becomes a *PanicError.
func dispatch(operation []byte, payload []byte) (response []byte, err error) {
	fn, ok := functions[string(operation)] // no allocation for the lookup
	if !ok {
		return nil, unknownOperation(string(operation))
	}
	defer func() {
		if v := recover(); v != nil {
			response = nil
			err = &PanicError{Operation: string(operation), Value: v, Location: panicLocation()}
		}
	}()
	return fn(payload)
}

func unknownOperation(op string) error {
	names := make([]string, 0, len(functions))
	for name := range functions {
		names = append(names, name)
	}
	slices.Sort(names)
	return fmt.Errorf("%w %q (registered: %s)", ErrUnknownOperation, op, strings.Join(names, ", "))
}

// panicLocation returns the first frame below the runtime's panic machinery,
// that is the function that panicked. It is called from a deferred function.
func panicLocation() string {
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line)
		}
		if !more {
			return ""
		}
	}
}
