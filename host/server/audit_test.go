package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/config"
)

// kubewardenAuditBody is the body Kubewarden's audit scanner sends to /audit/<policy>
// (../shared/AUDIT.md "The request"): no apiVersion or kind, resource.resource is the Kind,
// an empty userInfo and no oldObject.
func kubewardenAuditBody(uid, namespace string, obj any) []byte {
	b, _ := json.Marshal(map[string]any{"request": map[string]any{
		"uid":         uid,
		"kind":        map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"resource":    map[string]string{"group": "", "version": "v1", "resource": "Pod"},
		"requestKind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"name":        "p", "namespace": namespace, "operation": "CREATE",
		"userInfo": map[string]any{}, "object": obj,
	}})
	return b
}

// TestAuditEndpoint: /audit/<id> answers the body Kubewarden's audit scanner sends with the
// policy's raw verdict (monitor mode and the namespace that /validate always accepts do not
// apply: an audit reports what the policy says), and counts it with mode="audit".
func TestAuditEndpoint(t *testing.T) {
	h := start(t, harnessOpts{policies: semanticsPolicies(t), loader: semanticsLoader(t), options: func(o *config.Options) {
		o.AlwaysAcceptNamespace = "trusted"
	}})
	owner := map[string]string{"owner": "me"}
	for _, tc := range []struct {
		name, path, ns string
		obj            any
		allowed        bool
		msg            string
	}{
		{"compliant", "/audit/labels", "default", pod(owner), true, ""},
		{"violating", "/audit/labels", "default", pod(nil), false, `mandatory label "owner" is missing`},
		{"monitor mode gives the verdict", "/audit/labels-monitor", "default", pod(nil), false, "owner"},
		{"the always-accepted namespace is audited", "/audit/labels", "trusted", pod(nil), false, "owner"},
		{"a group", "/audit/grp", "default", pod(nil), false, "needs an owner label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, r := h.review(tc.path, kubewardenAuditBody("a-"+tc.name, tc.ns, tc.obj))
			if code != 200 || r.UID != "a-"+tc.name {
				t.Fatalf("HTTP %d uid %q", code, r.UID)
			}
			if r.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (status %+v)", r.Allowed, tc.allowed, r.Status)
			}
			if tc.msg != "" && (r.Status == nil || !strings.Contains(r.Status.Message, tc.msg)) {
				t.Errorf("status %+v, want a message with %q", r.Status, tc.msg)
			}
		})
	}
	// a policy that failed to load: 500 with an AdmissionReview, which an audit reports as an error
	code, r := h.review("/audit/broken", kubewardenAuditBody("a-broken", "default", pod(nil)))
	if code != 500 || r.Allowed || r.Status == nil || r.Status.Code != 500 {
		t.Errorf("broken policy: HTTP %d %+v", code, r)
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_policy_evaluations_total{accepted="false",mode="audit",mutated="false",operation="CREATE",policy="labels-monitor"} 1`) {
		t.Errorf("no audit evaluation counted for labels-monitor:\n%s", grepLines(metrics, "tollgate_policy_evaluations_total"))
	}
}
