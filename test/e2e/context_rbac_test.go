package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestContextAwareRBAC: the controller gives a PolicyServer whose policy declares
// contextAwareResources a ClusterRole and ClusterRoleBinding granting exactly those kinds (and
// SubjectAccessReviews for can_i); the server's replica, reaching the API with its
// ServiceAccount's token, then reads the Ingresses the context-aware example policy
// (examples/unique-ingress-host) needs, and the apiserver's webhook call rejects an Ingress whose
// host another namespace uses. The ClusterRole follows a policy edit and goes with the policy.
func TestContextAwareRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	op := startOperator(t, ctx, "--set", "contextAwarePolicies=true") // the chart's opt-in: the controller writes ClusterRoles
	const server, policy = "ctx", "unique-ingress-host"
	serverObject := "policy-server-" + server
	role := "tollgate-" + serverObject + "-context-aware"
	t.Cleanup(func() { op.deleteAll(t, []string{"ClusterAdmissionPolicy/" + policy, "PolicyServer/" + server}) })
	cs := env.cluster.Client
	for _, ns := range []string{"rbac-a", "rbac-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	ingress := func(ns, name, host string) error {
		pathType := networkingv1.PathTypePrefix
		_, err := cs.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pathType,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}},
			}}}}}, metav1.CreateOptions{})
		return err
	}
	if err := ingress("rbac-b", "taken", "taken.example.com"); err != nil {
		t.Fatal(err)
	}

	apply(t, ctx, policyServerYAML(server, 1, ""))
	module := policyRef(t, "unique-ingress-host")
	policyManifest := func(kinds string) string {
		return `apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: ` + policy + `
spec:
  policyServer: ` + server + `
  module: ` + module + `
  mutating: false
  rules:
    - apiGroups: ["networking.k8s.io"]
      apiVersions: ["v1"]
      resources: ["ingresses"]
      operations: ["CREATE"]
  namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [rbac-a]}
  contextAwareResources: ` + kinds + "\n"
	}
	apply(t, ctx, policyManifest("[{apiVersion: networking.k8s.io/v1, kind: Ingress}]"))

	read := []string{"get", "list", "watch"}
	sar := rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}
	waitRules := func(want []rbacv1.PolicyRule) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			cr, err := cs.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(cr.Rules, want) {
				return fmt.Errorf("ClusterRole %s rules %+v, want %+v", role, cr.Rules, want)
			}
			crb, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, role, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if crb.RoleRef.Name != role || len(crb.Subjects) != 1 || crb.Subjects[0].Name != serverObject || crb.Subjects[0].Namespace != controllerNS {
				return fmt.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
			}
			return nil
		})
	}
	waitRules([]rbacv1.PolicyRule{{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read}, sar})

	// The replica's ServiceAccount may read Ingresses everywhere and ask SubjectAccessReviews,
	// and still nothing else.
	pods, err := waitServerPods(ctx, cs, controllerNS, serverObject, 1, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	scs, err := serviceAccountClient(ctx, &pods[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scs.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the server's ServiceAccount cannot list Ingresses: %v", err)
	}
	if _, err := scs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "someone", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods"}}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("the server's ServiceAccount cannot create SubjectAccessReviews: %v", err)
	}
	if _, err := scs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the server's ServiceAccount lists Namespaces, which no policy declares: %v", err)
	}
	if _, err := scs.CoreV1().Secrets("rbac-b").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the server's ServiceAccount lists Secrets: %v", err)
	}

	// The policy decides by the cluster, through that access.
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", policy, "active", 90*time.Second)
	err = ingress("rbac-a", "web", "taken.example.com")
	if err == nil || !strings.Contains(err.Error(), `Ingress rbac-a/web: host "taken.example.com" is already used by Ingress rbac-b/taken`) {
		t.Fatalf("an Ingress on a host rbac-b uses: %v", err)
	}
	if err := ingress("rbac-a", "free", "free.example.com"); err != nil {
		t.Fatalf("an Ingress on a free host: %v", err)
	}

	// A policy edit changes the ClusterRole; deleting the policy removes it.
	apply(t, ctx, policyManifest("[{apiVersion: networking.k8s.io/v1, kind: Ingress}, {apiVersion: v1, kind: Namespace}]"))
	waitRules([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read}, sar})
	op.deleteAll(t, []string{"ClusterAdmissionPolicy/" + policy})
	eventually(t, 30*time.Second, func() error {
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ClusterRole %s still there: %v", role, err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, role, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ClusterRoleBinding %s still there: %v", role, err)
		}
		return nil
	})
}
