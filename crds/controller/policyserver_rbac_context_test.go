package controller

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

func TestContextAccessOf(t *testing.T) {
	tests := []struct {
		name          string
		yml           string
		wantResources []resourceKind
		wantCanI      bool
		wantErr       string
	}{
		{name: "no context-aware policy, can_i allowed but no client", yml: `{"a":{"hostCapabilities":["*"],"contextAwareResources":[]}}`},
		{
			name: "policies and group members, duplicates once, sorted",
			yml: `{"a":{"hostCapabilities":["oci/*"],"contextAwareResources":[{"apiVersion":"v1","kind":"Namespace"},{"apiVersion":"networking.k8s.io/v1","kind":"Ingress"}]},
			      "g":{"policies":{"m":{"hostCapabilities":["kubernetes/get_resource"],"contextAwareResources":[{"apiVersion":"v1","kind":"Namespace"},{"apiVersion":"apps/v1","kind":"Deployment"}]}}}}`,
			wantResources: []resourceKind{{"apps/v1", "Deployment"}, {"networking.k8s.io/v1", "Ingress"}, {"v1", "Namespace"}},
		},
		{
			name: "can_i by one policy's capabilities, kinds by another's",
			yml: `{"a":{"hostCapabilities":["kubernetes/can_i"],"contextAwareResources":[]},
			      "b":{"hostCapabilities":["kubernetes/list_resources_all"],"contextAwareResources":[{"apiVersion":"v1","kind":"Pod"}]}}`,
			wantResources: []resourceKind{{"v1", "Pod"}}, wantCanI: true,
		},
		{name: "kubernetes/* allows can_i", yml: `{"a":{"hostCapabilities":["kubernetes/*"],"contextAwareResources":[{"apiVersion":"v1","kind":"Pod"}]}}`,
			wantResources: []resourceKind{{"v1", "Pod"}}, wantCanI: true},
		{name: "no hostCapabilities field allows can_i", yml: `{"a":{"contextAwareResources":[{"apiVersion":"v1","kind":"Pod"}]}}`,
			wantResources: []resourceKind{{"v1", "Pod"}}, wantCanI: true},
		{name: "an empty list denies it", yml: `{"a":{"hostCapabilities":[],"contextAwareResources":[{"apiVersion":"v1","kind":"Pod"}]}}`,
			wantResources: []resourceKind{{"v1", "Pod"}}},
		{name: "not JSON", yml: `a: 1`, wantErr: "reading policies.yml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := contextAccessOf([]byte(tt.yml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.resources, tt.wantResources) || a.canI != tt.wantCanI {
				t.Fatalf("got %+v canI=%v, want %+v canI=%v", a.resources, a.canI, tt.wantResources, tt.wantCanI)
			}
		})
	}
}

func TestContextAwareRules(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct{ group, version, kind, resource string }{
		{"", "v1", "Namespace", "namespaces"}, {"", "v1", "Pod", "pods"},
		{"networking.k8s.io", "v1", "Ingress", "ingresses"}, {"apps", "v1", "Deployment", "deployments"},
	} {
		gv := schema.GroupVersion{Group: k.group, Version: k.version}
		mapper.AddSpecific(gv.WithKind(k.kind), gv.WithResource(k.resource), gv.WithResource(strings.TrimSuffix(k.resource, "s")), meta.RESTScopeRoot)
	}
	a := contextAccess{resources: []resourceKind{{"apps/v1", "Deployment"}, {"example.com/v1", "Widget"}, {"networking.k8s.io/v1", "Ingress"},
		{"v1", "Namespace"}, {"v1", "Pod"}, {"a/b/c", "Bad"}}, canI: true}
	rules, unknown, err := contextAwareRules(mapper, a)
	if err != nil {
		t.Fatal(err)
	}
	read := []string{"get", "list", "watch"}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces", "pods"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(rules, want) {
		t.Errorf("rules\n%+v\nwant\n%+v", rules, want)
	}
	if !slices.Equal(unknown, []string{"example.com/v1/Widget", "a/b/c/Bad"}) {
		t.Errorf("unknown = %v", unknown)
	}
}

// TestContextAwareRBACReconcile: a server whose policies declare kinds gets a ClusterRole and
// ClusterRoleBinding it controls, updated when the policies change and deleted when none is left
// context-aware; a server without context-aware policies makes no write for them.
func TestContextAwareRBACReconcile(t *testing.T) {
	ing := psCAP("ing", "default", "")
	ing.Spec.ContextAwareResources = []v1.ContextAwareResource{{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}}
	e := newPSEnv(t, psObj("default"), psObj("plain"), ing, psCAP("p", "plain", ""))
	e.r.APIReader = e.c
	e.r.RESTMapper = testrestmapper.TestOnlyStaticRESTMapper(Scheme())
	name := ContextAwareRoleName("default")
	if name != "tollgate-policy-server-default-context-aware" {
		t.Fatalf("name %s", name)
	}
	if _, err, writes := e.reconcile("default"); err != nil {
		t.Fatal(err)
	} else if !slices.Contains(writes, "apply ClusterRole "+name) || !slices.Contains(writes, "apply ClusterRoleBinding "+name) {
		t.Fatalf("writes: %v", writes)
	}
	role := &rbacv1.ClusterRole{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: name}, role); err != nil {
		t.Fatal(err)
	}
	ps := e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	read := []string{"get", "list", "watch"}
	sar := rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read}, sar}
	if !reflect.DeepEqual(role.Rules, wantRules) || !metav1.IsControlledBy(role, ps) || role.Labels[v1.PolicyServerLabel] != "default" {
		t.Fatalf("ClusterRole %+v rules %+v", role.ObjectMeta, role.Rules)
	}
	binding := &rbacv1.ClusterRoleBinding{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: name}, binding); err != nil {
		t.Fatal(err)
	}
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "policy-server-default", Namespace: psTestNS}}
	if binding.RoleRef.Name != name || binding.RoleRef.Kind != "ClusterRole" || !reflect.DeepEqual(binding.Subjects, wantSubjects) || !metav1.IsControlledBy(binding, ps) {
		t.Fatalf("ClusterRoleBinding %+v %+v", binding.RoleRef, binding.Subjects)
	}

	// Nothing changed: no write.
	if _, err, writes := e.reconcile("default"); err != nil || slices.ContainsFunc(writes, func(w string) bool { return strings.Contains(w, "ClusterRole") }) {
		t.Fatalf("second reconcile: %v %v", err, writes)
	}

	// A policy adds a kind: the ClusterRole follows.
	ns := psCAP("ns", "default", "")
	ns.Spec.ContextAwareResources = []v1.ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}
	if err := e.c.Create(e.ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Contains(writes, "apply ClusterRole "+name) {
		t.Fatalf("after adding a policy: %v %v", err, writes)
	}
	_ = e.c.Get(e.ctx, client.ObjectKey{Name: name}, role)
	wantRules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: read}, wantRules[0], sar}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Fatalf("rules after adding a policy %+v", role.Rules)
	}

	// No context-aware policy left: both go.
	for _, p := range []*v1.ClusterAdmissionPolicy{ing, ns} {
		if err := e.c.Delete(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Contains(writes, "delete ClusterRole "+name) || !slices.Contains(writes, "delete ClusterRoleBinding "+name) {
		t.Fatalf("after deleting the policies: %v %v", err, writes)
	}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: name}, role); !apierrors.IsNotFound(err) {
		t.Fatalf("ClusterRole still there: %v", err)
	}

	// A server without context-aware policies writes nothing for them.
	if _, err, writes := e.reconcile("plain"); err != nil || slices.ContainsFunc(writes, func(w string) bool { return strings.Contains(w, "ClusterRole") }) {
		t.Fatalf("plain server: %v %v", err, writes)
	}
}
