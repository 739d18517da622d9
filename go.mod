module github.com/tollgate-dev/tollgate

go 1.26

require (
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	github.com/tetratelabs/wazero v1.12.0
	github.com/wapc/wapc-go v0.7.0
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/inconshreveable/mousetrap v1.1.0 // indirect

require (
	github.com/Workiva/go-datastructures v1.1.5 // indirect
	github.com/tollgate-dev/tollgate/sdk v0.0.0
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.44.0 // indirect
	sigs.k8s.io/yaml v1.6.0
)

replace github.com/tollgate-dev/tollgate/sdk => ./sdk
