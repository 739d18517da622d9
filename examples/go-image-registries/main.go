// Command go-image-registries is a Kubewarden-compatible policy written in
// standard Go with tollgate's sdk: it accepts Pods (and workloads that hold a
// Pod template) only when every container image comes from an allowed
// registry, and can set imagePullPolicy: Always on every container.
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s -o policy.wasm .
package main

import "github.com/tollgate-dev/tollgate/sdk/guest"

func init() {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

// main stays empty: the module is a reactor, the host calls __guest_call.
func main() {}
