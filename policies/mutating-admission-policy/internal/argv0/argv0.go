// Package argv0 gives the program a name when the host passes no arguments.
//
// Hosts of waPC modules (wapc-go, Kubewarden's policy-server) start a module
// with an empty argv, and k8s.io/klog's init reads os.Args[0], which would
// panic. Go initializes packages in import-path order among those whose
// imports are done; this package imports only os and its path sorts before
// k8s.io/..., so it runs before klog's init. Import it for its side effect
// from the main package.
//
// It must not know anything else.
package argv0

import "os"

func init() {
	if len(os.Args) == 0 {
		os.Args = []string{"mutating-admission-policy"}
	}
}
