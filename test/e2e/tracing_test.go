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
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// TestTracingAcrossTheAPIServer: `tollgate serve` (a process on loopback, its generated
// certificate, OTEL_* pointing at the test's OTLP receiver) is the URL webhook of a
// ValidatingWebhookConfiguration whose policy denies Pods and ConfigMaps without an owner label.
// Two ways a denied request becomes one trace holding the apiserver's spans and tollgate's:
//
//   - kubectl: a plain `kubectl apply -f pod.yaml` (the real kubectl, no trace context of the
//     test's) through a second kube-apiserver of the cluster whose tracing configuration samples
//     every request (samplingRatePerMillion 1000000): the apiserver starts the trace;
//   - traceparent: through the suite's apiserver, which samples nothing of its own
//     (samplingRatePerMillion 0), a server-side apply sent with a sampled W3C traceparent, as an
//     instrumented client sends it: the apiserver continues the caller's trace.
//
// In both the server span is a child of an apiserver span and the policy's span is under it.
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

	// the webhook: Pods and ConfigMaps created in ns go to the policy
	url := strings.Replace(srv.base, "http://", "https://", 1) + "/validate/deny"
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(10)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tracing-e2e"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "deny.tracing-e2e.tollgate.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "pods"}}}},
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

	t.Run("kubectl", func(t *testing.T) { testTracingKubectl(t, ctx, ns, dir) })
	t.Run("traceparent", func(t *testing.T) { testTracingTraceparent(t, ctx, ns) })
}

// testTracingKubectl: a second kube-apiserver that samples every request (its own tracing
// configuration, the same receiver); `kubectl apply -f pod.yaml` through it is denied with the
// policy's message, and the one trace of tollgate's server span for that Pod holds the
// apiserver's spans and tollgate's: the server span descends from the apiserver's server span of
// kubectl's POST (user agent kubectl) up to the trace's root, an apiserver span (kubectl sent no
// trace context), and the policy's span is under it.
func testTracingKubectl(t *testing.T, ctx context.Context, ns, dir string) {
	cfg := filepath.Join(dir, "tracing-all.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: "+
		env.otlp.Addr()+"\nsamplingRatePerMillion: 1000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	api, err := env.cluster.StartAPIServer(ctx, "kube-apiserver-traced", "--tracing-config-file="+cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(api.LogTail(30))
		}
		begin := time.Now()
		if err := api.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("e2e: the traced kube-apiserver stopped in %v", time.Since(begin).Round(time.Millisecond))
	})
	t.Logf("e2e: a second kube-apiserver, sampling every request, ready in %v", api.StartDuration.Round(time.Millisecond))

	const name = "unowned-pod"
	manifest := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Pod
metadata:
  name: `+name+`
  namespace: `+ns+`
spec:
  containers:
  - name: app
    image: `+cluster.PauseImage+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	message := `Pod ` + ns + `/` + name + `: mandatory label "owner" is missing`
	// until the namespace's ServiceAccount exists (the ServiceAccount admission plugin runs
	// before the webhooks) and the apiserver's webhook configuration is in force
	begin := time.Now()
	eventually(t, 60*time.Second, func() error {
		out, errOut, err := api.Kubectl(ctx, nil, "apply", "-f", manifest)
		if err == nil {
			env.cluster.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
			return fmt.Errorf("kubectl apply was admitted (%s): the webhook is not in force yet", strings.TrimSpace(out))
		}
		if !strings.Contains(errOut, `admission webhook "deny.tracing-e2e.tollgate.dev" denied the request: `+message) {
			return fmt.Errorf("kubectl apply failed otherwise: %v", err)
		}
		return nil
	})
	t.Logf("e2e: kubectl apply denied %v after the apiserver was ready", time.Since(begin).Round(time.Millisecond))

	isServer := func(sp otlptest.Span) bool {
		return sp.Resource["service.name"] == "tollgate-e2e" && sp.Name == "POST /validate/{id}" &&
			sp.Attributes["tollgate.request.kind"] == "Pod" && sp.Attributes["tollgate.request.name"] == name
	}
	var traceID string
	spans := env.otlp.WaitFor(t, 90*time.Second, "tollgate's server span of the Pod and the apiserver's and tollgate's spans of its trace", func(s []otlptest.Span) bool {
		traceID = ""
		for _, sp := range s {
			if isServer(sp) {
				traceID = sp.TraceID
			}
		}
		var api, pol bool
		for _, sp := range s {
			if traceID == "" || sp.TraceID != traceID {
				continue
			}
			switch {
			case sp.Resource["service.name"] == "apiserver":
				api = true
			case sp.Name == "policy deny":
				pol = true
			}
		}
		return api && pol
	})
	var server, pol otlptest.Span
	var servers int
	apiSpans := map[string]otlptest.Span{}
	for _, sp := range spans {
		if isServer(sp) {
			servers++
		}
		if sp.TraceID != traceID {
			continue
		}
		switch {
		case sp.Resource["service.name"] == "apiserver":
			apiSpans[sp.SpanID] = sp
		case isServer(sp):
			server = sp
		case sp.Name == "policy deny":
			pol = sp
		}
	}
	if servers != 1 {
		t.Errorf("%d tollgate server spans for Pod %s, want 1 (one denied apply)", servers, name)
	}
	// tollgate's server span descends from the apiserver's spans (the webhook call's client
	// span), up to the trace's root, an apiserver span without a parent: kubectl sent no trace
	// context, the apiserver started the trace; on the way, the apiserver's server span of
	// kubectl's POST
	var chain []string
	var post otlptest.Span
	for id := server.ParentSpanID; id != ""; id = apiSpans[id].ParentSpanID {
		sp, ok := apiSpans[id]
		if !ok {
			t.Fatalf("tollgate's server span's ancestor %s is not one of the apiserver's spans of trace %s %v", id, traceID, names(apiSpans))
		}
		chain = append(chain, sp.Name)
		if len(chain) > len(apiSpans) {
			t.Fatalf("a cycle among the apiserver's spans %v", names(apiSpans))
		}
		if sp.Name == "POST /api/v1/namespaces/{:namespace}/pods" {
			post = sp
		}
	}
	if len(chain) == 0 {
		t.Fatalf("tollgate's server span %+v has no parent", server)
	}
	if post.Kind.String() != "SPAN_KIND_SERVER" {
		t.Errorf("no apiserver server span of the POST among tollgate's server span's ancestors %v", chain)
	}
	if ua := userAgent(post); !strings.HasPrefix(ua, "kubectl") {
		t.Errorf("the POST's user agent %q (attributes %v), want kubectl's", ua, post.Attributes)
	}
	if pol.ParentSpanID != server.SpanID || pol.Attributes["tollgate.policy.allowed"] != false {
		t.Errorf("policy span %+v: want a denial under the server span %s", pol, server.SpanID)
	}
	if server.Attributes["tollgate.request.namespace"] != ns || server.Attributes["tollgate.request.operation"] != "CREATE" {
		t.Errorf("server span attributes %v", server.Attributes)
	}
	t.Logf("trace %s: %s <- %s <- %s; %d apiserver spans", traceID, pol.Name, server.Name, strings.Join(chain, " <- "), len(apiSpans))
}

// userAgent is the user agent an HTTP server span records (the current semantic conventions'
// attribute, or the older one).
func userAgent(sp otlptest.Span) string {
	for _, k := range []string{"user_agent.original", "http.user_agent"} {
		if ua, ok := sp.Attributes[k].(string); ok {
			return ua
		}
	}
	return ""
}

func names(spans map[string]otlptest.Span) map[string]string {
	m := make(map[string]string, len(spans))
	for id, sp := range spans {
		m[id] = sp.Name
	}
	return m
}

// testTracingTraceparent: through the suite's apiserver (samplingRatePerMillion 0), a
// server-side apply (what `kubectl apply --server-side` sends) that the policy denies, sent with
// a sampled W3C traceparent of a fresh trace: the apiserver continues that trace, and the
// receiver holds its spans and tollgate's, the server span a child of an apiserver span.
func testTracingTraceparent(t *testing.T, ctx context.Context, ns string) {
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
