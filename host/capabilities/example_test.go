package capabilities_test

import (
	"context"
	"fmt"

	"github.com/tollgate-dev/tollgate/host/capabilities"
)

// A policy's host calls answered from a recorded session (kwctl's format),
// and refused outside what the policy was granted.
func ExampleHost_ForPolicy() {
	session, err := capabilities.ParseSession("session.yml", []byte(`
- type: Exchange
  request: |
    !KubernetesGetResource
    api_version: v1
    kind: Namespace
    name: team-a
    namespace: null
    disable_cache: false
  response:
    type: Success
    payload: '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}}'
`))
	if err != nil {
		panic(err)
	}
	host := capabilities.New(capabilities.Options{Replay: session})
	defer host.Close()
	call, err := host.ForPolicy("my-policy", capabilities.Allow{
		Resources:        []capabilities.Resource{{APIVersion: "v1", Kind: "Namespace"}},
		HostCapabilities: []string{"kubernetes/*"},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	answer, err := call(ctx, "kubewarden", "kubernetes", "get_resource",
		[]byte(`{"api_version":"v1","kind":"Namespace","name":"team-a","disable_cache":false}`))
	fmt.Println(string(answer), err)
	_, err = call(ctx, "kubewarden", "kubernetes", "get_resource",
		[]byte(`{"api_version":"v1","kind":"Secret","name":"s","namespace":"team-a","disable_cache":false}`))
	fmt.Println(err)
	_, err = call(ctx, "kubewarden", "net", "v1/dns_lookup_host", []byte(`"example.com"`))
	fmt.Println(err)
	// Output:
	// {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}} <nil>
	// Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported.
	// Policy has not been granted access to the 'net/v1/dns_lookup_host' host capability. The violation has been reported.
}
