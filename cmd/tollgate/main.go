// Command tollgate is a Kubernetes admission policy host that runs policies
// compiled to WebAssembly (Kubewarden-compatible waPC modules).
//
// This package holds flags and output only; the logic lives in host/.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	cmd := newRootCmd()
	if err := cmd.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a given status and message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
