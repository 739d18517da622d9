module github.com/tollgate-dev/tollgate/sdk

go 1.26
