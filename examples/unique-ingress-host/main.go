// Command unique-ingress-host is a context-aware Kubewarden policy: it rejects an Ingress whose
// host is already used by another Ingress of the cluster, which it finds through the
// kubernetes/list_resources_all host capability (networking.k8s.io/v1 Ingress, declared in
// metadata.yml's contextAwareResources). It is written with the tollgate SDK's capabilities
// helpers and built with TinyGo. See README.md.
package main

import (
	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	wapc "github.com/wapc/wapc-guest-tinygo"
)

// host makes the policy's host calls; native tests point its Call at sdk/guest's HostCall,
// which sdk/policytest answers.
var host = capabilities.Host{Call: wapc.HostCall}

func main() {
	wapc.RegisterFunctions(wapc.Functions{
		"validate":          validate,
		"validate_settings": validateSettings,
		"protocol_version":  func([]byte) ([]byte, error) { return []byte(`"v1"`), nil },
	})
}
