//go:build !wasip1

package guest

import (
	"fmt"
	"os"
	"sync"
)

// HostCallHandler answers HostCall in the native build, in place of a host.
// An error it returns reaches the caller of HostCall as a *HostError with the
// error's text, exactly as a host's error answer would.
type HostCallHandler func(binding, namespace, operation string, payload []byte) ([]byte, error)

var (
	nativeMu        sync.Mutex
	hostCallHandler HostCallHandler
	consoleLogger   func(msg string)
)

// Invoke runs a registered operation the way the host would through
// __guest_call: an unknown operation, an error or a panic become the error
// the host would receive. Only in the native build, for tests.
func Invoke(operation string, payload []byte) ([]byte, error) {
	return dispatch([]byte(operation), payload)
}

// SetHostCallHandler sets the handler that answers HostCall in the native
// build (nil: every host call fails) and returns the previous one, so a test
// can write defer guest.SetHostCallHandler(guest.SetHostCallHandler(h)).
func SetHostCallHandler(h HostCallHandler) (previous HostCallHandler) {
	nativeMu.Lock()
	defer nativeMu.Unlock()
	previous, hostCallHandler = hostCallHandler, h
	return previous
}

// SetConsoleLogger sets the function that receives ConsoleLog messages in
// the native build (nil: standard error) and returns the previous one.
func SetConsoleLogger(logger func(msg string)) (previous func(msg string)) {
	nativeMu.Lock()
	defer nativeMu.Unlock()
	previous, consoleLogger = consoleLogger, logger
	return previous
}

// HostCall asks the host to run namespace/operation of binding with payload
// and returns the host's answer, or a *HostError with the host's message.
// In the native build the handler set with SetHostCallHandler answers.
func HostCall(binding, namespace, operation string, payload []byte) ([]byte, error) {
	nativeMu.Lock()
	h := hostCallHandler
	nativeMu.Unlock()
	if h == nil {
		return nil, &HostError{Message: fmt.Sprintf("no host call handler set for %s/%s/%s", binding, namespace, operation)}
	}
	response, err := h(binding, namespace, operation, payload)
	if err != nil {
		return nil, &HostError{Message: err.Error()}
	}
	if response == nil {
		response = []byte{}
	}
	return response, nil
}

// ConsoleLog writes msg to the host's console log. In the native build it
// goes to the function set with SetConsoleLogger, or to standard error.
func ConsoleLog(msg string) {
	nativeMu.Lock()
	l := consoleLogger
	nativeMu.Unlock()
	if l == nil {
		fmt.Fprintln(os.Stderr, msg)
		return
	}
	l(msg)
}
