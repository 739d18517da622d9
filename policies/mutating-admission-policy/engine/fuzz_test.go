package engine

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// FuzzDecode: bad settings are errors wrapping ErrInvalidSettings, never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		sidecarApply, sidecarJSONPatch, policyWith(setReplicas5),
		`{}`, `null`, `[]`, `{"policy": null}`, `{"policy": []}`, `{"policy": {"spec": 1}}`,
		`{"policy": {"mutations": [{"patchType": "JSONPatch"}]}}`,
		`{"policy": {"matchConstraints": {"resourceRules": [{}]}, "reinvocationPolicy": "Never", "mutations": []}, "params": [null]}`,
		`{"policy": {"kind": "MutatingAdmissionPolicy", "apiVersion": "admissionregistration.k8s.io/v1alpha1", "spec": {}}, "binding": {"paramRef": {}}}`,
		`{"policy": {}, "namespaces": [{"metadata": {}}]}`,
		"policy:\n  matchConstraints: {namespaceSelector: {matchExpressions: [{key: a, operator: Bad}]}}\n",
		policyWith(setReplicas5) + rbacFixture,
		policyWith(setReplicas5) + "\nrbac: {roles: [null, 1, {}], clusterRoles: [{metadata: {name: a}, aggregationRule: {clusterRoleSelectors: [{}]}}]}\n",
		policyWith(setReplicas5) + "\nrbac: {roleBindings: [{metadata: {name: a, namespace: b}, roleRef: {kind: Foo}, subjects: [{}]}]}\n",
		policyWith(setReplicas5) + "\nrbac: []\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidSettings) {
				t.Fatalf("error does not wrap ErrInvalidSettings: %v", err)
			}
			return
		}
		if s.Policy == nil || s.Binding == nil || s.Policy.Spec.FailurePolicy == nil || len(s.Policy.Spec.Mutations) == 0 {
			t.Fatalf("accepted settings without a complete policy: %+v", s)
		}
		// Accepted RBAC objects never make the authorizer fail.
		for _, a := range []authorizer.Attributes{
			res(userInfo("alice", "system:authenticated"), "get", "", "pods", "ns", "p"),
			path(userInfo("alice", "system:authenticated"), "get", "/healthz"),
		} {
			if _, _, err := newAuthorizer(s.RBAC).Authorize(context.Background(), a); err != nil {
				t.Fatalf("authorizer error: %v", err)
			}
		}
	})
}
