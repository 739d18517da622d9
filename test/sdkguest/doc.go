// Package sdkguest tests policies built with the standard-Go guest of sdk/
// (examples/go-image-registries) through the real host: each test builds the
// example with GOOS=wasip1 and runs it through host/policy, so the waPC ABI of
// sdk/guest, the helpers of sdk/kubewarden and the host are exercised together.
// It must not know about host internals beyond host/policy's public API.
package sdkguest
