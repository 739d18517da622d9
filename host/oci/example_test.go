package oci_test

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/host/oci"
)

func ExampleParseURI() {
	ref, err := oci.ParseURI("registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1")
	if err != nil {
		panic(err)
	}
	fmt.Println(ref.Registry, ref.Repository, ref.Tag)

	_, err = oci.ParseURI("https://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1")
	fmt.Println(err)
	// Output:
	// ghcr.io kubewarden/policies/pod-privileged v0.2.1
	// unknown module URI scheme: "https://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1": scheme "https://" is not registry://
}

func ExampleParseSources() {
	s, err := oci.ParseSources("sources.yml", []byte(`insecure_sources: ["127.0.0.1:5000", "registry.dev"]`))
	if err != nil {
		panic(err)
	}
	fmt.Println(s.IsInsecure("127.0.0.1:5000"), s.IsInsecure("registry.dev:8443"), s.IsInsecure("ghcr.io"))
	// Output: true true false
}
