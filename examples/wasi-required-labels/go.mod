module github.com/tollgate-dev/tollgate/examples/wasi-required-labels

go 1.26

require github.com/tollgate-dev/tollgate/sdk v0.0.0

replace github.com/tollgate-dev/tollgate/sdk => ../../sdk
