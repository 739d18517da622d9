//go:build wasip1

package wasi

import (
	"errors"
	"io"
	"os"
	"runtime"
	"unsafe"
)

//go:wasmimport host call
func hostCall(bindingPtr, bindingLen, namespacePtr, namespaceLen, operationPtr, operationLen, payloadPtr, payloadLen uint32) uint32

// HostCall calls a host capability (the same bindings and operations as
// waPC policies). The answer, or the host's error text, is read from stdin,
// which must have been read to its end before (Main does it).
func HostCall(binding, namespace, operation string, payload []byte) ([]byte, error) {
	rc := hostCall(strPtr(binding), uint32(len(binding)), strPtr(namespace), uint32(len(namespace)),
		strPtr(operation), uint32(len(operation)), bytesPtr(payload), uint32(len(payload)))
	answer, err := io.ReadAll(os.Stdin)
	if err != nil {
		return nil, err
	}
	runtime.KeepAlive(payload)
	if rc != 0 {
		return nil, errors.New(string(answer))
	}
	return answer, nil
}

func strPtr(s string) uint32 {
	if len(s) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

func bytesPtr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
