package examples_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestUniqueIngressHost runs the built context-aware example in the policy host, its host calls
// answered by host/capabilities replaying the sessions that test/e2e recorded against a real
// kube-apiserver, and checks that a kind the policy does not declare is refused.
func TestUniqueIngressHost(t *testing.T) {
	h := newHost(t)
	request := testfixture.File(t, "examples/unique-ingress-host/testdata/ingress-shop-web.json")
	ingress := capabilities.Resource{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}
	load := func(t *testing.T, id string, session string, allow capabilities.Allow) *policy.Policy {
		t.Helper()
		opts := capabilities.Options{}
		if session != "" {
			r, err := capabilities.LoadSession(testfixture.Path("examples/unique-ingress-host/testdata/" + session))
			if err != nil {
				t.Fatal(err)
			}
			opts.Replay = r
		}
		calls, err := capabilities.New(opts).ForPolicy(id, allow)
		if err != nil {
			t.Fatal(err)
		}
		p, err := h.Load(context.Background(), policy.Spec{
			ID:              id,
			Module:          testfixture.Module(t, "examples/unique-ingress-host"),
			HostCalls:       calls,
			HostCallsInline: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		session string
		allow   capabilities.Allow
		want    verdict
	}{
		{"session-conflict.yml", capabilities.Allow{Resources: []capabilities.Resource{ingress}},
			verdict{message: `Ingress shop/web: host "shop.example.com" is already used by Ingress team-b/storefront`, code: 409}},
		{"session-free.yml", capabilities.Allow{Resources: []capabilities.Resource{ingress}}, verdict{accepted: true}},
		{"", capabilities.Allow{}, verdict{code: 500, message: "cannot list the cluster's Ingresses: kubernetes/list_resources_all: Host error: " +
			"Policy has not been granted access to Kubernetes networking.k8s.io/v1/Ingress resources. The violation has been reported."}},
	}
	for _, tt := range tests {
		t.Run(tt.session, func(t *testing.T) {
			p := load(t, "unique-ingress-host-"+tt.session, tt.session, tt.allow)
			res, err := p.Validate(context.Background(), request)
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, tt.want)
		})
	}
}
