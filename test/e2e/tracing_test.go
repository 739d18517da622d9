package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestTracingAcrossTheAPIServer: kube-apiserver runs with a tracing configuration pointing at
// the test's OTLP receiver; `tollgate serve` (a process on loopback, its generated certificate,
// OTEL_* pointing at the same receiver) is the URL webhook of a ValidatingWebhookConfiguration.
// A server-side apply (what `kubectl apply --server-side` sends) that a policy denies, sent with
// a sampled W3C traceparent as an instrumented client sends it, yields one trace holding the
// apiserver's spans and tollgate's: the server span a child of an apiserver span, and the
// policy's span under it.
func TestTracingAcrossTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := env.cluster.Client
	ns := "tracing-e2e"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	// tollgate serve over HTTPS with a generated certificate, tracing to the receiver
	dir := t.TempDir()
	pols := filepath.Join(dir, "policies.yml")
	mod := testfixture.Path("examples/required-labels/policy.wasm")
	if err := os.WriteFile(pols, []byte("deny:\n  module: file://"+mod+"\n  settings: {mandatory_labels: [owner]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", env.otlp.Endpoint) // startServe's process inherits them
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
	t.Setenv("OTEL_SERVICE_NAME", "tollgate-e2e")
	srv := startServe(t, ctx, pols, "--insecure-http=false", "--state-dir", filepath.Join(dir, "tls"))
	ca, err := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}

	// the webhook: ConfigMaps created in ns go to the policy
	url := strings.Replace(srv.base, "http://", "https://", 1) + "/validate/deny"
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(10)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tracing-e2e"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "deny.tracing-e2e.tollgate.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"}}}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})

	// a client that sends a sampled traceparent of a fresh trace with each request
	var traceID string
	traced := rest.CopyConfig(env.cluster.Config)
	traced.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("traceparent", "00-"+traceID+"-"+randomHex(8)+"-01")
			return rt.RoundTrip(r)
		})
	})
	tcs, err := kubernetes.NewForConfig(traced)
	if err != nil {
		t.Fatal(err)
	}
	cm := corev1ac.ConfigMap("unowned", ns).WithData(map[string]string{"k": "v"})
	// the webhook configuration reaches the apiserver's admission a moment after its creation
	eventually(t, 60*time.Second, func() error {
		traceID = randomHex(16)
		_, err := tcs.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "e2e-tracing"})
		if err == nil {
			tcs.CoreV1().ConfigMaps(ns).Delete(ctx, "unowned", metav1.DeleteOptions{})
			return fmt.Errorf("the apply was admitted: the webhook is not in force yet")
		}
		if !strings.Contains(err.Error(), "deny.tracing-e2e.tollgate.dev") {
			return fmt.Errorf("the apply failed otherwise: %v", err)
		}
		return nil
	})

	spans := env.otlp.WaitFor(t, 90*time.Second, "the apiserver's and tollgate's spans of trace "+traceID, func(s []otlptest.Span) bool {
		var api, server, pol bool
		for _, sp := range s {
			if sp.TraceID != traceID {
				continue
			}
			switch {
			case sp.Resource["service.name"] == "tollgate-e2e" && sp.Name == "POST /validate/{id}":
				server = true
			case sp.Resource["service.name"] == "tollgate-e2e" && sp.Name == "policy deny":
				pol = true
			case sp.Resource["service.name"] == "apiserver":
				api = true
			}
		}
		return api && server && pol
	})
	apiSpans := map[string]string{}
	var server, pol otlptest.Span
	for _, sp := range spans {
		if sp.TraceID != traceID {
			continue
		}
		switch {
		case sp.Resource["service.name"] == "apiserver":
			apiSpans[sp.SpanID] = sp.Name
		case sp.Name == "POST /validate/{id}":
			server = sp
		case sp.Name == "policy deny":
			pol = sp
		}
	}
	if _, ok := apiSpans[server.ParentSpanID]; !ok {
		t.Errorf("tollgate's server span's parent %s is not one of the apiserver's spans %v", server.ParentSpanID, apiSpans)
	}
	if pol.ParentSpanID != server.SpanID || pol.Attributes["tollgate.policy.allowed"] != false {
		t.Errorf("policy span %+v: want a denial under the server span %s", pol, server.SpanID)
	}
	if server.Attributes["tollgate.request.kind"] != "ConfigMap" || server.Attributes["tollgate.request.namespace"] != ns ||
		server.Attributes["tollgate.request.name"] != "unowned" {
		t.Errorf("server span attributes %v", server.Attributes)
	}
	t.Logf("trace %s: apiserver spans %v; tollgate %s <- %s", traceID, apiSpans, pol.Name, server.Name)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
