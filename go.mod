module github.com/tollgate-dev/tollgate

go 1.26.0

require (
	github.com/opencontainers/go-digest v1.0.0
	github.com/opencontainers/image-spec v1.1.1
	golang.org/x/crypto v0.58.0
	golang.org/x/sync v0.24.0
	oras.land/oras-go/v2 v2.6.4
	sigs.k8s.io/yaml v1.6.0
)

require (
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
)

replace github.com/tollgate-dev/tollgate/sdk => ./sdk
