//go:build wasip1

package guest

import "unsafe"

// The waPC host functions (https://wapc.io/docs/spec/#required-host-exports).

//go:wasmimport wapc __guest_request
func guestRequest(operationPtr unsafe.Pointer, payloadPtr unsafe.Pointer)

//go:wasmimport wapc __guest_response
func guestResponse(ptr unsafe.Pointer, size uint32)

//go:wasmimport wapc __guest_error
func guestError(ptr unsafe.Pointer, size uint32)

//go:wasmimport wapc __host_call
func hostCall(bindingPtr unsafe.Pointer, bindingLen uint32,
	namespacePtr unsafe.Pointer, namespaceLen uint32,
	operationPtr unsafe.Pointer, operationLen uint32,
	payloadPtr unsafe.Pointer, payloadLen uint32) uint32

//go:wasmimport wapc __host_response_len
func hostResponseLen() uint32

//go:wasmimport wapc __host_response
func hostResponse(ptr unsafe.Pointer)

//go:wasmimport wapc __host_error_len
func hostErrorLen() uint32

//go:wasmimport wapc __host_error
func hostError(ptr unsafe.Pointer)

//go:wasmimport wapc __console_log
func consoleLog(ptr unsafe.Pointer, size uint32)

// maxRetainedRequest bounds the request buffer kept between calls: a larger
// request gets a buffer of its own that the garbage collector reclaims.
const maxRetainedRequest = 1 << 20

// requestBuf holds the operation name and payload of the current call; it is
// reused from call to call (a Wasm instance runs one call at a time).
var requestBuf []byte

// guestCall is the waPC entry point: the host calls it with the sizes of the
// operation name and payload, the guest fetches both with __guest_request,
// runs the Function and answers with __guest_response (result 1) or
// __guest_error (result 0).
//
//go:wasmexport __guest_call
func guestCall(operationSize uint32, payloadSize uint32) uint32 {
	n := int(operationSize) + int(payloadSize)
	var buf []byte
	if n <= cap(requestBuf) {
		buf = requestBuf[:n]
	} else {
		buf = make([]byte, n)
		if n <= maxRetainedRequest {
			requestBuf = buf
		}
	}
	operation := buf[:operationSize:operationSize]
	payload := buf[operationSize:n:n]
	guestRequest(unsafe.Pointer(unsafe.SliceData(buf)), unsafe.Pointer(unsafe.SliceData(payload)))

	response, err := dispatch(operation, payload)
	if err != nil {
		msg := err.Error()
		guestError(unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
		return 0
	}
	guestResponse(unsafe.Pointer(unsafe.SliceData(response)), uint32(len(response)))
	return 1
}

// HostCall asks the host to run namespace/operation of binding with payload
// and returns the host's answer, or a *HostError with the host's message.
func HostCall(binding, namespace, operation string, payload []byte) ([]byte, error) {
	ok := hostCall(
		unsafe.Pointer(unsafe.StringData(binding)), uint32(len(binding)),
		unsafe.Pointer(unsafe.StringData(namespace)), uint32(len(namespace)),
		unsafe.Pointer(unsafe.StringData(operation)), uint32(len(operation)),
		unsafe.Pointer(unsafe.SliceData(payload)), uint32(len(payload)),
	)
	if ok != 1 {
		msg := make([]byte, hostErrorLen())
		if len(msg) > 0 {
			hostError(unsafe.Pointer(unsafe.SliceData(msg)))
		}
		return nil, &HostError{Message: string(msg)}
	}
	// The response is the caller's to keep, so it gets its own buffer.
	response := make([]byte, hostResponseLen())
	if len(response) > 0 {
		hostResponse(unsafe.Pointer(unsafe.SliceData(response)))
	}
	return response, nil
}

// ConsoleLog writes msg to the host's console log.
func ConsoleLog(msg string) {
	consoleLog(unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}
