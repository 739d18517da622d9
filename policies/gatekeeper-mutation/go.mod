module github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation

go 1.25

require github.com/wapc/wapc-guest-tinygo v0.3.3
