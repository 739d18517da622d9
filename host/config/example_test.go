package config_test

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/host/config"
)

func ExampleParsePolicies() {
	pols, _, err := config.ParsePolicies("policies.yml", []byte(`
pod-privileged:
  module: registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.2
  policyMode: monitor
  settings: {skip_init_containers: true}
`))
	if err != nil {
		panic(err)
	}
	p := pols[0]
	fmt.Println(p.ID, p.Mode, string(p.Settings))

	_, _, err = config.ParsePolicies("policies.yml", []byte("pod-privileged: {module: x, policyMode: enforce}"))
	fmt.Println(err)
	// Output:
	// pod-privileged monitor {"skip_init_containers":true}
	// policies.yml:1: policy "pod-privileged": field policyMode: value "enforce": must be protect or monitor
}
