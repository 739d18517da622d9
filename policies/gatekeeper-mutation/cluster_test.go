package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/policytest"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// clusterSettings: fromCluster, one AssignMetadata selecting namespaces
// labelled env=prod.
const clusterSettings = `{"fromCluster":true,"mutators":[{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignMetadata",` +
	`"metadata":{"name":"prod-owner"},"spec":{"match":{"namespaceSelector":{"matchLabels":{"env":"prod"}}},` +
	`"location":"metadata.labels.owner","parameters":{"assign":{"value":"platform"}}}}]}`

// newClusterHost answers the guest's host calls with sdk/policytest until
// the test ends.
func newClusterHost(t *testing.T) *policytest.Host {
	t.Helper()
	prev := hostCall
	hostCall = guest.HostCall
	t.Cleanup(func() { hostCall = prev })
	return policytest.NewHost(t)
}

func nsGet(name string, fresh bool) capabilities.GetResourceRequest {
	return capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: name, DisableCache: fresh}
}

func namespaceJSON(name, labels string) json.RawMessage {
	return json.RawMessage(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `","labels":{` + labels + `}}}`)
}

func podRequest(namespace string) protocol.KubernetesAdmissionRequest {
	return protocol.KubernetesAdmissionRequest{
		UID: "1", Kind: protocol.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: namespace, Name: "web", Operation: "CREATE",
		UserInfo: protocol.UserInfo{Username: "alice"},
		Object:   json.RawMessage(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"` + namespace + `"},"spec":{"containers":[{"name":"main","image":"nginx"}]}}`),
	}
}

func validateWith(t *testing.T, req protocol.KubernetesAdmissionRequest, settings string) protocol.ValidationResponse {
	t.Helper()
	rb, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(protocol.ValidationRequest{Request: rb, Settings: json.RawMessage(settings)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := validate(payload)
	if err != nil {
		t.Fatal(err)
	}
	r, err := policytest.DecodeValidationResponse(out)
	if err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return r
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestValidateFromCluster: with fromCluster the request's Namespace comes
// from kubernetes/get_resource (the cache, then the apiserver when the cache
// does not have it, as Gatekeeper's webhook reads it); a namespace that does
// not exist fails the request as in Gatekeeper, and so does a host call that
// fails.
func TestValidateFromCluster(t *testing.T) {
	notFound := func(name string) string {
		return "Cannot find v1/Namespace named '" + name + "' inside of namespace 'None'"
	}
	tests := []struct {
		name      string
		host      func(t *testing.T, h *policytest.Host)
		req       protocol.KubernetesAdmissionRequest
		mutated   bool
		rejected  string // in the message
		wantCalls int
	}{
		{
			name: "selected namespace",
			host: func(t *testing.T, h *policytest.Host) {
				must(t, h.Answer("kubernetes", "get_resource", nsGet("shop", false), namespaceJSON("shop", `"env":"prod"`)))
			},
			req: podRequest("shop"), mutated: true, wantCalls: 1,
		},
		{
			name: "namespace not selected",
			host: func(t *testing.T, h *policytest.Host) {
				must(t, h.Answer("kubernetes", "get_resource", nsGet("shop", false), namespaceJSON("shop", `"env":"dev"`)))
			},
			req: podRequest("shop"), wantCalls: 1,
		},
		{
			name: "not in the cache yet: asked again without it",
			host: func(t *testing.T, h *policytest.Host) {
				must(t, h.Fail("kubernetes", "get_resource", nsGet("new", false), notFound("new")))
				must(t, h.Answer("kubernetes", "get_resource", nsGet("new", true), namespaceJSON("new", `"env":"prod"`)))
			},
			req: podRequest("new"), mutated: true, wantCalls: 2,
		},
		{
			name: "namespace does not exist",
			host: func(t *testing.T, h *policytest.Host) {
				must(t, h.Fail("kubernetes", "get_resource", nsGet("gone", false), notFound("gone")))
				must(t, h.Fail("kubernetes", "get_resource", nsGet("gone", true), notFound("gone")))
			},
			req: podRequest("gone"), rejected: `cannot read the request's namespace from the cluster: namespaces "gone" not found`, wantCalls: 2,
		},
		{
			name: "host call fails",
			host: func(t *testing.T, h *policytest.Host) {
				must(t, h.Fail("kubernetes", "get_resource", nsGet("shop", false),
					"Policy has not been granted access to Kubernetes v1/Namespace resources. The violation has been reported."))
			},
			req:       podRequest("shop"),
			rejected:  "Policy has not been granted access to Kubernetes v1/Namespace resources",
			wantCalls: 1,
		},
		{
			name: "answer is not a Namespace",
			host: func(t *testing.T, h *policytest.Host) {
				must(t, h.Answer("kubernetes", "get_resource", nsGet("shop", false), json.RawMessage(`{"metadata":{"name":"shop","labels":{"env":["prod"]}}}`)))
			},
			req: podRequest("shop"), rejected: "the cluster's answer for Namespace shop: the object does not decode as a v1 Namespace", wantCalls: 1,
		},
		{
			name: "a Namespace object is its own namespace: no call",
			host: func(*testing.T, *policytest.Host) {},
			req: protocol.KubernetesAdmissionRequest{
				UID: "1", Kind: protocol.GroupVersionKind{Version: "v1", Kind: "Namespace"}, Name: "shop", Operation: "CREATE",
				Object: namespaceJSON("shop", `"env":"prod"`),
			},
			mutated: true,
		},
		{
			name: "cluster-scoped object: no call",
			host: func(*testing.T, *policytest.Host) {},
			req: protocol.KubernetesAdmissionRequest{
				UID: "1", Kind: protocol.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: "n1", Operation: "CREATE",
				Object: json.RawMessage(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}`),
			},
			mutated: true, // namespaceSelector never excludes a cluster-scoped object
		},
		{
			name: "DELETE is not mutated: no call",
			host: func(*testing.T, *policytest.Host) {},
			req: func() protocol.KubernetesAdmissionRequest {
				r := podRequest("shop")
				r.Operation = "DELETE"
				return r
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newClusterHost(t)
			tt.host(t, h)
			r := validateWith(t, tt.req, clusterSettings)
			msg := ""
			if r.Message != nil {
				msg = *r.Message
			}
			switch {
			case tt.rejected != "":
				if r.Accepted || !strings.Contains(msg, tt.rejected) || !strings.HasPrefix(msg, "cannot read the request's namespace from the cluster: ") {
					t.Fatalf("want rejected with %q, got accepted=%v %q", tt.rejected, r.Accepted, msg)
				}
			case !r.Accepted:
				t.Fatalf("rejected: %s", msg)
			case tt.mutated != (r.MutatedObject != nil):
				t.Fatalf("mutated=%v, want %v: %s", r.MutatedObject != nil, tt.mutated, r.MutatedObject)
			case tt.mutated && !strings.Contains(string(r.MutatedObject), `"owner":"platform"`):
				t.Fatalf("mutated object %s", r.MutatedObject)
			}
			if calls := h.Calls(); len(calls) != tt.wantCalls {
				t.Fatalf("%d host calls, want %d: %v", len(calls), tt.wantCalls, calls)
			}
		})
	}
}

// TestFromClusterSettings: the settings' namespaces and fromCluster do not
// go together, and fromCluster is a boolean.
func TestFromClusterSettings(t *testing.T) {
	for _, tt := range []struct{ settings, want string }{
		{`{"fromCluster":true,"namespaces":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}],"mutators":[]}`, "namespaces: fromCluster takes the namespaces from the cluster"},
		{`{"fromCluster":"yes","mutators":[]}`, "fromCluster: must be true or false, got string"},
	} {
		out, err := validateSettings([]byte(tt.settings))
		if err != nil {
			t.Fatal(err)
		}
		r, err := policytest.DecodeSettingsValidationResponse(out)
		if err != nil || r.Valid || r.Message == nil || !strings.Contains(*r.Message, tt.want) {
			t.Errorf("%s: %s %v, want refused with %q", tt.settings, out, err, tt.want)
		}
	}
	// fromCluster: false keeps the settings' namespaces; no host call.
	h := newClusterHost(t)
	r := validateWith(t, podRequest("shop"), `{"fromCluster":false,"namespaces":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop","labels":{"env":"prod"}}}],`+clusterSettings[len(`{"fromCluster":true,`):])
	if !r.Accepted || !strings.Contains(string(r.MutatedObject), `"owner":"platform"`) || len(h.Calls()) != 0 {
		t.Fatalf("%+v %s calls=%v", r, r.MutatedObject, h.Calls())
	}
}
