package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ingresses creates a test's namespaces and Ingresses on the e2e cluster and, when the test ends,
// deletes the Ingresses it created and the namespaces (without a namespace controller, deleting
// a namespace leaves its Ingresses behind, where other tests' lists would see them).
type ingresses struct {
	t       *testing.T
	ctx     context.Context
	created map[string]bool // namespace/name
}

func newIngresses(t *testing.T, ctx context.Context, namespaces ...string) *ingresses {
	t.Helper()
	cs := env.cluster.Client
	g := &ingresses{t: t, ctx: ctx, created: map[string]bool{}}
	for _, ns := range namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	t.Cleanup(func() {
		for key := range g.created {
			ns, name, _ := strings.Cut(key, "/")
			_ = cs.NetworkingV1().Ingresses(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	return g
}

// create makes Ingress ns/name with one rule per host, each routing / to the Service name.
func (g *ingresses) create(ns, name string, hosts ...string) {
	g.t.Helper()
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for _, h := range hosts {
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{Host: h, IngressRuleValue: networkingv1.IngressRuleValue{
			HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pathType,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}},
		}})
	}
	if _, err := env.cluster.Client.NetworkingV1().Ingresses(ns).Create(g.ctx, ing, metav1.CreateOptions{}); err != nil {
		g.t.Fatal(err)
	}
	g.created[ns+"/"+name] = true
}

func (g *ingresses) delete(ns, name string) {
	g.t.Helper()
	if err := env.cluster.Client.NetworkingV1().Ingresses(ns).Delete(g.ctx, name, metav1.DeleteOptions{}); err != nil {
		g.t.Fatal(err)
	}
	delete(g.created, ns+"/"+name)
}

// verdict is the part of an AdmissionResponse the Ingress tests check.
type verdict struct {
	Allowed bool
	Status  struct {
		Message string
		Code    int
	}
}

// runVerdict runs `tollgate run ARGS...` and decodes the AdmissionResponse it prints.
func runVerdict(t *testing.T, ctx context.Context, args ...string) verdict {
	t.Helper()
	out, _ := tollgateRun(t, ctx, append([]string{"run"}, args...)...)
	var v verdict
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return v
}
