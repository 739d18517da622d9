module github.com/tollgate-dev/tollgate/examples/capabilities-drop

go 1.26

require (
	github.com/kubewarden/policy-sdk-go v0.13.1
	github.com/tollgate-dev/tollgate/sdk v0.0.0
	github.com/wapc/wapc-guest-tinygo v0.3.3
)

require (
	github.com/go-openapi/strfmt v0.21.3 // indirect
	github.com/kubewarden/k8s-objects v1.29.0-kw1 // indirect
)

// Without this replace the SDK's dependency on go-openapi/strfmt pulls in net/http, which TinyGo
// cannot build.
replace github.com/go-openapi/strfmt => github.com/kubewarden/strfmt v0.1.3

replace github.com/tollgate-dev/tollgate/sdk => ../../sdk
