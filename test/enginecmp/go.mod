module github.com/tollgate-dev/tollgate/test/enginecmp

go 1.26.0

require (
	github.com/bytecodealliance/wasmtime-go/v39 v39.0.1
	github.com/tetratelabs/wazero v1.12.0
	github.com/tollgate-dev/tollgate v0.0.0-00010101000000-000000000000
	github.com/tollgate-dev/tollgate/sdk v0.0.0
	github.com/wapc/wapc-go v0.7.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/OneOfOne/xxhash v1.2.8 // indirect
	github.com/Workiva/go-datastructures v1.1.5 // indirect
	github.com/agnivade/levenshtein v1.1.1 // indirect
	github.com/gobwas/glob v0.2.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/open-policy-agent/opa v0.65.0 // indirect
	github.com/rcrowley/go-metrics v0.0.0-20200313005456-10cdbea86bc0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/tchap/go-patricia/v2 v2.3.1 // indirect
	github.com/xeipuuv/gojsonpointer v0.0.0-20190905194746-02993c407bfb // indirect
	github.com/xeipuuv/gojsonreference v0.0.0-20180127040603-bd5ef7bd5415 // indirect
	github.com/yashtewari/glob-intersection v0.2.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/sys v0.49.0 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)

replace (
	github.com/tollgate-dev/tollgate => ../..
	github.com/tollgate-dev/tollgate/sdk => ../../sdk
)
