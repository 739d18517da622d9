module github.com/tollgate-dev/tollgate

go 1.26.0

require github.com/tollgate-dev/tollgate/sdk v0.0.0

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	oras.land/oras-go/v2 v2.6.4 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace github.com/tollgate-dev/tollgate/sdk => ./sdk
