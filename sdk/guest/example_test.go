//go:build !wasip1

package guest_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tollgate-dev/tollgate/sdk/guest"
)

// A policy registers its operations from init(); main stays empty.
func ExampleRegisterFunctions() {
	guest.RegisterFunctions(map[string]guest.Function{
		"upper": func(payload []byte) ([]byte, error) { return bytes.ToUpper(payload), nil },
	})

	out, err := guest.Invoke("upper", []byte("hello"))
	fmt.Println(string(out), err)
	// Output: HELLO <nil>
}

// Invoke runs an operation natively as the host would, errors and panics
// included.
func ExampleInvoke() {
	guest.RegisterFunctions(map[string]guest.Function{
		"divide": func(payload []byte) ([]byte, error) {
			if len(payload) == 0 {
				return nil, errors.New("empty payload")
			}
			zero := len(payload) - len(payload)
			return []byte{byte(10 / zero)}, nil
		},
	})

	_, err := guest.Invoke("divide", nil)
	fmt.Println(err)
	_, err = guest.Invoke("divide", []byte("x"))
	var pe *guest.PanicError
	fmt.Println(errors.As(err, &pe), pe.Value)
	_, err = guest.Invoke("multiply", nil)
	fmt.Println(errors.Is(err, guest.ErrUnknownOperation))
	// Output:
	// empty payload
	// true runtime error: integer divide by zero
	// true
}

func ExampleHostCall() {
	defer guest.SetHostCallHandler(guest.SetHostCallHandler(
		func(binding, namespace, operation string, payload []byte) ([]byte, error) {
			if namespace == "net" && operation == "v1/dns_lookup_host" {
				return []byte(`["192.0.2.1"]`), nil
			}
			return nil, fmt.Errorf("%s/%s is not allowed", namespace, operation)
		}))

	ips, err := guest.HostCall("kubewarden", "net", "v1/dns_lookup_host", []byte(`"example.com"`))
	fmt.Println(string(ips), err)
	_, err = guest.HostCall("kubewarden", "kubernetes", "get_resource", []byte(`{}`))
	fmt.Println(err)
	// Output:
	// ["192.0.2.1"] <nil>
	// host error: kubernetes/get_resource is not allowed
}

func ExampleSetHostCallHandler() {
	var calls []string
	previous := guest.SetHostCallHandler(func(binding, namespace, operation string, payload []byte) ([]byte, error) {
		calls = append(calls, binding+"/"+namespace+"/"+operation)
		return nil, nil
	})
	defer guest.SetHostCallHandler(previous)

	_, _ = guest.HostCall("kubewarden", "tracing", "log", []byte(`{"level":"info","message":"hi"}`))
	fmt.Println(calls)
	// Output: [kubewarden/tracing/log]
}

func ExampleConsoleLog() {
	defer guest.SetConsoleLogger(guest.SetConsoleLogger(func(msg string) { fmt.Println("console:", msg) }))

	guest.ConsoleLog("policy loaded")
	// Output: console: policy loaded
}

func ExampleSetConsoleLogger() {
	var lines []string
	defer guest.SetConsoleLogger(guest.SetConsoleLogger(func(msg string) { lines = append(lines, msg) }))

	guest.ConsoleLog("a")
	guest.ConsoleLog("b")
	fmt.Println(lines)
	// Output: [a b]
}

func ExampleHostError() {
	defer guest.SetHostCallHandler(guest.SetHostCallHandler(nil))

	_, err := guest.HostCall("kubewarden", "oci", "v1/manifest_digest", []byte(`"busybox"`))
	var he *guest.HostError
	fmt.Println(errors.As(err, &he), he.Message)
	// Output: true no host call handler set for kubewarden/oci/v1/manifest_digest
}
