module github.com/tollgate-dev/tollgate/test/testdata/policies/wapc-required-labels

go 1.26

require github.com/tollgate-dev/tollgate/sdk v0.0.0

replace github.com/tollgate-dev/tollgate/sdk => ../../../../sdk
