package cluster_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

const denyMessage = "denied by e2e probe"

// TestCluster starts a real etcd and kube-apiserver, drives them with the real kubectl, and proves
// the recipe the operator's e2e test relies on: a webhook Service without Pods, published by an
// EndpointSlice pointing at a listener on 127.0.0.1, is called by the apiserver.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute) // a cold tool build included
	defer cancel()
	c := startCluster(t, ctx, cluster.Options{Logf: t.Logf})
	t.Logf("timing: apiserver ready %v after start", c.StartDuration.Round(time.Millisecond))

	t.Run("version", func(t *testing.T) {
		v, err := c.Client.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		// Unstamped builds say v0.0.0-master, which charts' kubeVersion constraints refuse.
		if v.Major != "1" || !strings.HasPrefix(v.GitVersion, "v1.") {
			t.Fatalf("server version %+v; want a stamped v1.x (scripts/install-k8s-tools.sh ldflags)", v)
		}
		t.Logf("server version %s", v.GitVersion)
	})

	t.Run("kubectl get ns", func(t *testing.T) {
		out, _, err := c.Kubectl(ctx, "get", "ns", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "namespace/default") {
			t.Fatalf("kubectl get ns: no namespace/default in %q", out)
		}
	})

	t.Run("kubectl apply server-side dry-run", func(t *testing.T) {
		manifest := `apiVersion: v1
kind: ConfigMap
metadata:
  name: probe
  namespace: default
data:
  k: v
`
		out, _, err := c.KubectlWithInput(ctx, strings.NewReader(manifest),
			"apply", "--server-side", "--dry-run=server", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "configmap/probe serverside-applied (server dry run)") {
			t.Fatalf("unexpected kubectl output %q", out)
		}
		if _, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "probe", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("dry run created the ConfigMap (get: %v)", err)
		}
	})

	t.Run("RBAC applies to impersonated users", func(t *testing.T) {
		cs, err := kubernetesFor(c, "system:serviceaccount:default:nobody")
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("an unprivileged user listed secrets: err = %v, want Forbidden", err)
		}
	})

	t.Run("webhook via EndpointSlice on loopback", func(t *testing.T) {
		testWebhookRouting(ctx, t, c)
	})
}

func testWebhookRouting(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	const ns, svc = "e2e-webhook", "probe-webhook"
	ca, err := cluster.NewCA("e2e-webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver sends <svc>.<ns>.svc as SNI and verifies it.
	certPEM, keyPEM, err := ca.ServingCert(svc + "." + ns + ".svc")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := &http.Server{
		Handler:   denyingWebhook(t, &calls),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{kp}},
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	core := c.Client.CoreV1()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Like the operator's: no selector, port name policy-server, port 443.
	if _, err := core.Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "policy-server", Port: 443, TargetPort: intstr.FromInt32(8443), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.PublishEndpoints(ctx, ns, svc, map[string]int32{"policy-server": port}); err != nil {
		t.Fatal(err)
	}
	// Publishing again updates the slice in place.
	if err := c.PublishEndpoints(ctx, ns, svc, map[string]int32{"policy-server": port}); err != nil {
		t.Fatal(err)
	}

	registered := time.Now()
	_, err = c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-probe"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "probe.e2e.tollgate.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Port: ptr.To[int32](443), Path: ptr.To("/validate")},
				CABundle: ca.CertPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The configuration takes effect after the apiserver's informer sees it (about 200 ms): until
	// then creations succeed and are undone; a routing error (no endpoints, x509) is reported if
	// it is still the answer at the deadline.
	cms := core.ConfigMaps(ns)
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for attempt := 0; ; attempt++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns}}
		created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), denyMessage) {
			t.Logf("timing: webhook effective %v after registration (%d attempts); error: %v",
				time.Since(registered).Round(time.Millisecond), attempt+1, err)
			break
		}
		if err == nil {
			last = nil
			_ = cms.Delete(ctx, created.Name, metav1.DeleteOptions{})
		} else {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook not effective 30 s after registration (webhook calls: %d); last error: %v", calls.Load(), last)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if calls.Load() == 0 {
		t.Fatal("denied, but the webhook server saw no call")
	}

	// kubectl sees the same refusal, and the webhook does not reach other namespaces.
	_, stderr, err := c.Kubectl(ctx, "create", "configmap", "via-kubectl", "-n", ns)
	if err == nil || !strings.Contains(stderr, denyMessage) {
		t.Fatalf("kubectl create configmap in %s: err %v, stderr %q; want refusal %q", ns, err, stderr, denyMessage)
	}
	if _, _, err := c.Kubectl(ctx, "create", "configmap", "outside-webhook", "-n", "default"); err != nil {
		t.Fatalf("a ConfigMap outside %s was refused: %v", ns, err)
	}
}

// denyingWebhook answers every AdmissionReview with a denial carrying denyMessage.
func denyingWebhook(t *testing.T, calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			t.Errorf("webhook: bad AdmissionReview (%v)", err)
			http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		review.Response = &admissionv1.AdmissionResponse{
			UID:     review.Request.UID,
			Allowed: false,
			Result:  &metav1.Status{Code: http.StatusForbidden, Message: denyMessage},
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	})
}

func kubernetesFor(c *cluster.Cluster, user string, groups ...string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.ImpersonatedConfig(user, groups...))
}

// startCluster starts a cluster and registers its Stop (with its logs when the test failed).
func startCluster(t *testing.T, ctx context.Context, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.LogTail(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}
