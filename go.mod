module github.com/tollgate-dev/tollgate

go 1.26.0

require (
	github.com/spf13/pflag v1.0.9
	gopkg.in/yaml.v3 v3.0.1
)

replace github.com/tollgate-dev/tollgate/sdk => ./sdk
