module github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation

go 1.26

require (
	github.com/tollgate-dev/tollgate/sdk v0.0.0
	github.com/wapc/wapc-guest-tinygo v0.3.3
)

replace github.com/tollgate-dev/tollgate/sdk => ../../sdk
