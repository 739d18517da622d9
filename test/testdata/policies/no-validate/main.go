// Command no-validate is a test fixture: a waPC module that registers validate_settings but no
// validate operation, so a host must refuse it (or fail every evaluation) with a clear error.
package main

import (
	wapc "github.com/wapc/wapc-guest-tinygo"
)

func main() {
	wapc.RegisterFunctions(wapc.Functions{
		"validate_settings": func([]byte) ([]byte, error) {
			return []byte(`{"valid":true}`), nil
		},
	})
}
