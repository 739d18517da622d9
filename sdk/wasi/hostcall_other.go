//go:build !wasip1

package wasi

import "errors"

// HostCall fails outside a wasip1 build: there is no host.
func HostCall(binding, namespace, operation string, payload []byte) ([]byte, error) {
	return nil, errors.New("host calls need a wasip1 build")
}
