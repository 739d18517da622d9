package wasi

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Policy is what a WASI policy does. Each function receives the document
// read from stdin and returns the JSON to write to stdout; an error ends the
// process with exit code 1 and the error's text on stderr (Kubewarden makes
// it a rejection with code 500, or invalid settings).
type Policy struct {
	// Validate receives {"request": R, "settings": S} and returns a ValidationResponse.
	Validate func(payload []byte) ([]byte, error)
	// ValidateSettings receives the settings object and returns a
	// SettingsValidationResponse. Nil accepts every settings object.
	ValidateSettings func(settings []byte) ([]byte, error)
}

// Main runs the policy on os.Args, os.Stdin and os.Stdout, and exits.
func Main(p Policy) {
	if code := Run(p, os.Args, os.Stdin, os.Stdout, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// Run is Main with explicit argv and streams (for tests); it returns the exit code.
func Run(p Policy, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if len(args) != 2 {
		return fail(fmt.Errorf("usage: %s validate|validate-settings (the document on stdin)", argv0(args)))
	}
	var fn func([]byte) ([]byte, error)
	switch args[1] {
	case "validate":
		fn = p.Validate
	case "validate-settings":
		fn = p.ValidateSettings
		if fn == nil {
			fn = func([]byte) ([]byte, error) { return []byte(`{"valid":true}`), nil }
		}
	default:
		return fail(fmt.Errorf("unknown command %q (want validate or validate-settings)", args[1]))
	}
	if fn == nil {
		return fail(fmt.Errorf("%s is not implemented", args[1]))
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		return fail(fmt.Errorf("reading stdin: %w", err))
	}
	out, err := fn(in)
	if err != nil {
		return fail(err)
	}
	if _, err := stdout.Write(out); err != nil {
		return fail(fmt.Errorf("writing stdout: %w", err))
	}
	return 0
}

func argv0(args []string) string {
	if len(args) == 0 {
		return "policy.wasm"
	}
	return args[0]
}

// Accept is an accepting ValidationResponse.
func Accept() ([]byte, error) { return []byte(`{"accepted":true}`), nil }

// Reject is a rejecting ValidationResponse with a message (and code when non-zero).
func Reject(message string, code int) ([]byte, error) {
	r := struct {
		Accepted bool   `json:"accepted"`
		Message  string `json:"message"`
		Code     int    `json:"code,omitempty"`
	}{false, message, code}
	return json.Marshal(r)
}

// Mutate is an accepting ValidationResponse with a mutated object.
func Mutate(object any) ([]byte, error) {
	o, err := json.Marshal(object)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Accepted bool            `json:"accepted"`
		Mutated  json.RawMessage `json:"mutated_object"`
	}{true, o})
}

// SettingsValid and SettingsInvalid are SettingsValidationResponses.
func SettingsValid() ([]byte, error) { return []byte(`{"valid":true}`), nil }

func SettingsInvalid(message string) ([]byte, error) {
	return json.Marshal(struct {
		Valid   bool   `json:"valid"`
		Message string `json:"message"`
	}{false, message})
}
