package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/telemetry"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/otlptest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// marker is in every object and setting the traced tests send: no span
// attribute may carry it.
const marker = "do-not-trace-me-7f3a"

// tracedPolicies: a single policy, a group of two members, and the
// context-aware example (its host calls answered by host/capabilities).
func tracedPolicies(t testing.TB) string {
	labels := wasmPath(t, "examples/required-labels")
	return fmt.Sprintf(`
deny:
  module: file://%[1]s
  settings: {mandatory_labels: [owner], denied_labels: [%[3]s]}
g:
  expression: team() || owner()
  message: needs a team or an owner
  policies:
    team:
      module: file://%[1]s
      settings: {mandatory_labels: [team]}
    owner:
      module: file://%[1]s
      settings: {mandatory_labels: [owner]}
unique:
  module: file://%[2]s
  contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]
`, labels, wasmPath(t, "examples/unique-ingress-host"), marker)
}

// ingressCluster is the Kubernetes capability on client-go's in-memory
// dynamic client, holding Ingress team-b/storefront for shop.example.com.
func ingressCluster(t testing.TB) *capabilities.Kubernetes {
	gvr := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
	ing := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"metadata": map[string]any{"name": "storefront", "namespace": "team-b"},
		"spec":     map[string]any{"rules": []any{map[string]any{"host": "shop.example.com"}}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "IngressList"}, ing)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}, meta.RESTScopeNamespace)
	k, err := capabilities.NewKubernetes(capabilities.KubeOptions{Dynamic: dyn, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startTraced starts a server exporting its spans to a real OTLP receiver
// (gRPC), configured as `tollgate serve` is: from OTEL_* variables.
func startTraced(t testing.TB, rcv *otlptest.Receiver, policies string, env ...string) (*harness, *telemetry.Telemetry) {
	t.Helper()
	vars := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	cfg, err := telemetry.FromEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.New(context.Background(), cfg, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tel.Shutdown(ctx)
	})
	ph, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: cacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ph.Close(context.Background()) })
	caps := capabilities.New(capabilities.Options{Kubernetes: ingressCluster(t)})
	t.Cleanup(caps.Close)
	loader := &HostLoader{Host: ph, Resolver: ResolverFunc(func(ctx context.Context, uri string) ([]byte, error) {
		return os.ReadFile(strings.TrimPrefix(uri, "file://"))
	})}
	loader.HostCalls = func(id string, res []config.ContextAwareResource, hc []string) (wasm.HostCallHandler, error) {
		allow := capabilities.Allow{HostCapabilities: hc}
		for _, r := range res {
			allow.Resources = append(allow.Resources, capabilities.Resource{APIVersion: r.APIVersion, Kind: r.Kind})
		}
		return caps.ForPolicy(id, allow)
	}
	h, so := prepare(t, harnessOpts{policies: policies, loader: loader, options: func(o *config.Options) {
		o.Workers = 2
		o.PolicyCooldownAfter = 1 // a policy's first timeout cools it down (TestTracingTimeoutAndCoolDown)
	}})
	so.Tracer, so.Propagator = tel.Tracer(), tel.Propagator()
	so.Metrics = append(so.Metrics, tel.Collectors()...)
	srv, err := New(context.Background(), so)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.serving()
	h.base = "https://" + srv.Addr()
	h.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: h.ca}, MaxIdleConnsPerHost: 64, ForceAttemptHTTP2: true}}
	return h, tel
}

// postTraced posts body with a W3C traceparent (and baggage) when
// traceparent is not empty; it returns the status and the answer.
func (h *harness) postTraced(path string, body []byte, traceparent string) (int, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest("POST", h.base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
		req.Header.Set("baggage", "tenant=a")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func inTrace(spans []otlptest.Span, traceID string) map[string]otlptest.Span {
	m := map[string]otlptest.Span{}
	for _, s := range spans {
		if s.TraceID == traceID {
			m[s.Name] = s
		}
	}
	return m
}

// wantAttrs fails for each attribute of want that s lacks or has otherwise.
func wantAttrs(t *testing.T, s otlptest.Span, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got, ok := s.Attributes[k]; !ok || got != v {
			t.Errorf("span %q: %s = %v (present %v), want %v", s.Name, k, got, ok, v)
		}
	}
}

// A request with a traceparent yields the server span in that trace, a
// child span per policy naming it, a span per group member, and spans for
// the host calls of a context-aware policy; no attribute carries the
// object or the settings.
func TestTracing(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	h, _ := startTraced(t, rcv, tracedPolicies(t))

	// a single policy, rejecting
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	obj := pod(map[string]string{"app": marker})
	code, body := h.postTraced("/validate/deny", reviewFor("uid-1", "CREATE", "default", obj), "00-"+traceID+"-"+parentID+"-01")
	if code != 200 || !bytes.Contains(body, []byte(`"allowed":false`)) {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	spans := rcv.WaitFor(t, 60*time.Second, "the server and policy spans of trace "+traceID, func(s []otlptest.Span) bool {
		return len(inTrace(s, traceID)) >= 2
	})
	tr := inTrace(spans, traceID)
	srvSpan, pol := tr["POST /validate/{id}"], tr["policy deny"]
	if srvSpan.Kind != tracepb.Span_SPAN_KIND_SERVER || srvSpan.ParentSpanID != parentID {
		t.Errorf("server span %+v: want kind SERVER, parent %s (the caller's)", srvSpan, parentID)
	}
	wantAttrs(t, srvSpan, map[string]any{"http.request.method": "POST", "http.route": "/validate/{id}", "url.path": "/validate/deny",
		"url.scheme": "https", "http.response.status_code": int64(200), "client.address": "127.0.0.1",
		"tollgate.request.uid": "uid-1", "tollgate.request.kind": "Pod",
		"tollgate.request.namespace": "default", "tollgate.request.name": "p", "tollgate.request.operation": "CREATE"})
	if srvSpan.Resource["service.name"] != "tollgate" {
		t.Errorf("resource %v", srvSpan.Resource)
	}
	if pol.ParentSpanID != srvSpan.SpanID {
		t.Errorf("policy span's parent %s, want the server span %s", pol.ParentSpanID, srvSpan.SpanID)
	}
	wantAttrs(t, pol, map[string]any{"tollgate.policy.id": "deny", "tollgate.policy.mode": "protect",
		"tollgate.policy.execution_mode": "kubewarden-wapc", "tollgate.policy.allowed": false, "tollgate.policy.mutated": false})
	if _, ok := pol.Attributes["tollgate.policy.cooled_down"]; ok {
		t.Errorf("cooled_down on a policy that ran: %v", pol.Attributes)
	}
	if d, _ := pol.Attributes["tollgate.policy.module.digest"].(string); !strings.HasPrefix(d, "sha256:") {
		t.Errorf("module digest %q", d)
	}
	if w, ok := pol.Attributes["tollgate.policy.queue_wait"].(float64); !ok || w < 0 {
		t.Errorf("queue wait %v", pol.Attributes["tollgate.policy.queue_wait"])
	}

	// a group: a span per member evaluated, under the group's
	const groupTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	code, body = h.postTraced("/validate/g", reviewFor("uid-2", "CREATE", "default", obj), "00-"+groupTrace+"-"+parentID+"-01")
	if code != 200 || !bytes.Contains(body, []byte(`"allowed":false`)) {
		t.Fatalf("group: HTTP %d: %s", code, body)
	}
	spans = rcv.WaitFor(t, 60*time.Second, "the group's spans", func(s []otlptest.Span) bool { return len(inTrace(s, groupTrace)) >= 4 })
	tr = inTrace(spans, groupTrace)
	g := tr["policy g"]
	wantAttrs(t, g, map[string]any{"tollgate.policy.execution_mode": "group", "tollgate.policy.allowed": false})
	for _, m := range []string{"member team", "member owner"} {
		if tr[m].ParentSpanID != g.SpanID || tr[m].Attributes["tollgate.policy.allowed"] != false {
			t.Errorf("%s: %+v, want a rejecting child of the group's span %s", m, tr[m], g.SpanID)
		}
	}

	// a context-aware policy: its host call is a span under the policy's
	const caTrace = "6bf92f3577b34da6a3ce929d0e0e4738"
	ingress := testfixture.File(t, "examples/unique-ingress-host/testdata/ingress-shop-web.json")
	code, body = h.postTraced("/validate/unique", ingress, "00-"+caTrace+"-"+parentID+"-01")
	if code != 200 || !bytes.Contains(body, []byte(`already used by Ingress team-b/storefront`)) {
		t.Fatalf("context-aware: HTTP %d: %s", code, body)
	}
	spans = rcv.WaitFor(t, 60*time.Second, "the context-aware policy's spans", func(s []otlptest.Span) bool { return len(inTrace(s, caTrace)) >= 3 })
	tr = inTrace(spans, caTrace)
	hc := tr["host_call kubernetes/list_resources_all"]
	if hc.ParentSpanID != tr["policy unique"].SpanID {
		t.Errorf("host call span %+v, want a child of the policy's span %s", hc, tr["policy unique"].SpanID)
	}
	wantAttrs(t, hc, map[string]any{"tollgate.host_call.capability": "kubernetes/list_resources_all", "tollgate.host_call.outcome": "success",
		"tollgate.policy.id": "unique"})
	if c := hc.Attributes["tollgate.host_call.cache"]; c != "hit" && c != "miss" {
		t.Errorf("host call cache %v, want hit or miss", c)
	}
	wantAttrs(t, tr["POST /validate/{id}"], map[string]any{"tollgate.request.kind": "Ingress",
		"tollgate.request.namespace": "shop", "tollgate.request.name": "web"})

	// without a traceparent, a trace of its own
	if code, _ := h.postTraced("/validate/deny", reviewFor("uid-root", "CREATE", "default", obj), ""); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	spans = rcv.WaitFor(t, 60*time.Second, "a root server span", func(s []otlptest.Span) bool {
		for _, sp := range s {
			if sp.Attributes["tollgate.request.uid"] == "uid-root" {
				return true
			}
		}
		return false
	})
	for _, s := range spans {
		if s.Attributes["tollgate.request.uid"] == "uid-root" && (s.ParentSpanID != "" || s.TraceID == traceID) {
			t.Errorf("a request without traceparent: span %+v, want a new root", s)
		}
		for k, v := range s.Attributes {
			if strings.Contains(fmt.Sprint(v), marker) {
				t.Errorf("span %q attribute %s carries the object or the settings: %v", s.Name, k, v)
			}
		}
	}
}

// A collector that stalls, then goes away: every request is answered as
// before (0 failed), the spans past the bounded queue are dropped, and
// /metrics counts them.
func TestTracingCollectorStalledOrDown(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	rcv.Stall()
	h, _ := startTraced(t, rcv, tracedPolicies(t), "OTEL_BSP_MAX_QUEUE_SIZE", "16", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8", "OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
	allowed := reviewFor("ok", "CREATE", "default", pod(map[string]string{"owner": "me"}))
	send := func(n int) (failed int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < n/4; i++ {
					req, _ := http.NewRequest("POST", h.base+"/validate/deny", bytes.NewReader(allowed))
					req.Header.Set("traceparent", fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", i+1+c*1000))
					resp, err := h.client.Do(req)
					ok := err == nil
					if ok {
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						ok = resp.StatusCode == 200 && bytes.Contains(b, []byte(`"allowed":true`))
					}
					if !ok {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return failed
	}
	if failed := send(200); failed != 0 {
		t.Fatalf("collector stalled: %d of 200 requests failed", failed)
	}
	rcv.Close() // the collector is gone
	if failed := send(200); failed != 0 {
		t.Fatalf("collector down: %d of 200 requests failed", failed)
	}
	_, metrics := h.get("/metrics")
	var dropped float64
	for _, line := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(line, "tollgate_telemetry_spans_dropped_total{"); ok {
			var n float64
			fmt.Sscan(rest[strings.Index(rest, "} ")+2:], &n)
			dropped += n
		}
	}
	// 400 requests made 800 spans; a stalled collector holds a queue (16)
	// and a batch (8), a missing one takes a batch per export timeout (2 s)
	if dropped < 400 {
		t.Errorf("/metrics: %v spans dropped, want most of 800:\n%s", dropped, grepLines(metrics, "tollgate_telemetry"))
	}
}

// A policy that runs out of time: its span says timeout (status Error); the
// next request, answered by the cool-down without running it, says
// cooled_down and cooling_down.
func TestTracingTimeoutAndCoolDown(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	pols := fmt.Sprintf("loop:\n  module: file://%s\n  settings: {behaviour: loop}\n  timeoutEvalSeconds: 1\n", wasmPath(t, "test/testdata/policies/misbehave"))
	h, _ := startTraced(t, rcv, pols)
	for i, want := range []string{"timed out", "cooling down"} {
		traceID := fmt.Sprintf("%032x", 0x7000+i)
		code, body := h.postTraced("/validate/loop", reviewFor(fmt.Sprintf("loop-%d", i), "CREATE", "default", pod(nil)), "00-"+traceID+"-00f067aa0ba902b7-01")
		if code != 200 || !bytes.Contains(body, []byte(want)) {
			t.Fatalf("request %d: HTTP %d %s, want %q", i, code, body, want)
		}
		spans := rcv.WaitFor(t, 60*time.Second, "the policy span of trace "+traceID, func(s []otlptest.Span) bool { _, ok := inTrace(s, traceID)["policy loop"]; return ok })
		pol := inTrace(spans, traceID)["policy loop"]
		if pol.StatusCode != tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("request %d: policy span status %v, want Error", i, pol.StatusCode)
		}
		if i == 0 {
			wantAttrs(t, pol, map[string]any{"tollgate.policy.error": "timeout", "tollgate.policy.allowed": false})
			if _, ok := pol.Attributes["tollgate.policy.cooled_down"]; ok {
				t.Errorf("the evaluation that timed out is marked cooled down: %v", pol.Attributes)
			}
		} else {
			wantAttrs(t, pol, map[string]any{"tollgate.policy.error": "cooling_down", "tollgate.policy.cooled_down": true})
		}
	}
}

// shadowSpans are the spans named "shadow <id>" that link to a span of
// traceID.
func shadowSpans(spans []otlptest.Span, id, traceID string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.Name != "shadow "+id {
			continue
		}
		for _, l := range s.Links {
			if l.TraceID == traceID {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// A shadow evaluation of a traced request has a span of its own, after the
// answer: a new trace (no parent) linked to the request's server span, with
// the policy span's attributes of the candidate, tollgate.shadow and the
// divergence; a group's members and a candidate's timeout are in it, and a
// candidate cooling down when its turn comes is a span saying dropped. The
// request's own trace gets nothing after its answer.
func TestTracingShadow(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	labels := wasmPath(t, "examples/required-labels")
	pols := fmt.Sprintf(`
deny:
  module: file://%[1]s
  settings: {mandatory_labels: [owner]}
  shadow:
    settings: {mandatory_labels: [owner, cost-center]}
g:
  expression: labels()
  policies:
    labels: {module: file://%[1]s, settings: {mandatory_labels: [owner]}}
  shadow:
    policies:
      labels: {settings: {mandatory_labels: [owner, cost-center]}}
slow:
  module: file://%[1]s
  settings: {mandatory_labels: [owner]}
  timeoutEvalSeconds: 1
  shadow:
    module: file://%[2]s
    settings: {behaviour: loop}
`, labels, wasmPath(t, "test/testdata/policies/misbehave"))
	h, _ := startTraced(t, rcv, pols)
	shadowsReady(t, h, "deny", "g", "slow")
	owned := reviewFor("uid-owned", "CREATE", "default", pod(map[string]string{"owner": "me"}))

	// the serving version allows, the candidate denies: a verdict divergence
	const traceID, parentID = "8bf92f3577b34da6a3ce929d0e0e4739", "00f067aa0ba902b7"
	code, body := h.postTraced("/validate/deny", owned, "00-"+traceID+"-"+parentID+"-01")
	if code != 200 || !bytes.Contains(body, []byte(`"allowed":true`)) {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	spans := rcv.WaitFor(t, 60*time.Second, "the shadow span linked to trace "+traceID, func(s []otlptest.Span) bool {
		return len(shadowSpans(s, "deny", traceID)) == 1 && len(inTrace(s, traceID)) >= 2
	})
	tr := inTrace(spans, traceID)
	srvSpan, pol := tr["POST /validate/{id}"], tr["policy deny"]
	sh := shadowSpans(spans, "deny", traceID)[0]
	if sh.TraceID == traceID || sh.ParentSpanID != "" {
		t.Errorf("shadow span in trace %s with parent %q: want a new trace, no parent", sh.TraceID, sh.ParentSpanID)
	}
	if len(sh.Links) != 1 || sh.Links[0].SpanID != srvSpan.SpanID {
		t.Errorf("shadow span's links %+v: want one, to the request's server span %s", sh.Links, srvSpan.SpanID)
	}
	wantAttrs(t, sh, map[string]any{"tollgate.policy.id": "deny", "tollgate.policy.mode": "protect", "tollgate.shadow": true,
		"tollgate.shadow.divergence": "verdict", "tollgate.policy.allowed": false, "tollgate.policy.mutated": false,
		"tollgate.policy.execution_mode": "kubewarden-wapc"})
	if d, _ := sh.Attributes["tollgate.policy.module.digest"].(string); !strings.HasPrefix(d, "sha256:") || d != pol.Attributes["tollgate.policy.module.digest"] {
		// same module, other settings: the same digest
		t.Errorf("shadow module digest %q, serving %v", d, pol.Attributes["tollgate.policy.module.digest"])
	}
	if w, ok := sh.Attributes["tollgate.policy.queue_wait"].(float64); !ok || w < 0 {
		t.Errorf("queue wait %v", sh.Attributes["tollgate.policy.queue_wait"])
	}
	if sh.Start.Before(pol.End) {
		t.Errorf("the shadow span starts at %v, before the serving evaluation ended (%v)", sh.Start, pol.End)
	}
	if sh.StatusCode == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("a candidate that answered: status %v", sh.StatusCode)
	}
	for name := range tr {
		if strings.HasPrefix(name, "shadow") {
			t.Errorf("span %q in the request's trace", name)
		}
	}

	// the two agree: divergence none; a group's candidate has its member spans
	const agreeTrace, groupTrace = "8bf92f3577b34da6a3ce929d0e0e4740", "8bf92f3577b34da6a3ce929d0e0e4741"
	both := reviewFor("uid-both", "CREATE", "default", pod(map[string]string{"owner": "me", "cost-center": "42"}))
	if code, body := h.postTraced("/validate/deny", both, "00-"+agreeTrace+"-"+parentID+"-01"); code != 200 || !bytes.Contains(body, []byte(`"allowed":true`)) {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	if code, body := h.postTraced("/validate/g", owned, "00-"+groupTrace+"-"+parentID+"-01"); code != 200 || !bytes.Contains(body, []byte(`"allowed":true`)) {
		t.Fatalf("group: HTTP %d: %s", code, body)
	}
	spans = rcv.WaitFor(t, 60*time.Second, "the shadow spans of the agreeing and the group request", func(s []otlptest.Span) bool {
		g := shadowSpans(s, "g", groupTrace)
		return len(shadowSpans(s, "deny", agreeTrace)) == 1 && len(g) == 1 && len(inTrace(s, g[0].TraceID)) >= 2
	})
	wantAttrs(t, shadowSpans(spans, "deny", agreeTrace)[0], map[string]any{"tollgate.shadow.divergence": "none", "tollgate.policy.allowed": true})
	g := shadowSpans(spans, "g", groupTrace)[0]
	wantAttrs(t, g, map[string]any{"tollgate.policy.execution_mode": "group", "tollgate.shadow.divergence": "verdict", "tollgate.policy.allowed": false})
	if m := inTrace(spans, g.TraceID)["member labels"]; m.ParentSpanID != g.SpanID || m.Attributes["tollgate.policy.allowed"] != false {
		t.Errorf("the group candidate's member span %+v, want a denial under the shadow span %s", m, g.SpanID)
	}

	// a candidate that loops: the answer does not wait for it (the serving
	// version answers at once; the candidate runs for its 1 s), its span says
	// timeout; the next request's candidate, cooling down, is dropped
	const slowTrace, coolTrace = "8bf92f3577b34da6a3ce929d0e0e4742", "8bf92f3577b34da6a3ce929d0e0e4743"
	if code, body := h.postTraced("/validate/slow", owned, "00-"+slowTrace+"-"+parentID+"-01"); code != 200 || !bytes.Contains(body, []byte(`"allowed":true`)) {
		t.Fatalf("slow: HTTP %d: %s", code, body)
	}
	spans = rcv.WaitFor(t, 60*time.Second, "the looping candidate's span", func(s []otlptest.Span) bool {
		return len(shadowSpans(s, "slow", slowTrace)) == 1 && len(inTrace(s, slowTrace)) >= 2
	})
	slow := shadowSpans(spans, "slow", slowTrace)[0]
	wantAttrs(t, slow, map[string]any{"tollgate.policy.error": "timeout", "tollgate.shadow.divergence": "error"})
	if slow.StatusCode != tracepb.Status_STATUS_CODE_ERROR || slow.End.Sub(slow.Start) < time.Second {
		t.Errorf("looping candidate's span: status %v, %v long; want Error, at least its 1 s", slow.StatusCode, slow.End.Sub(slow.Start))
	}
	if srv := inTrace(spans, slowTrace)["POST /validate/{id}"]; !srv.End.Before(slow.Start.Add(time.Second)) {
		t.Errorf("the request's server span ended at %v, the candidate started at %v and ran 1 s: the answer waited for it", srv.End, slow.Start)
	}
	if code, _ := h.postTraced("/validate/slow", owned, "00-"+coolTrace+"-"+parentID+"-01"); code != 200 {
		t.Fatalf("slow again: HTTP %d", code)
	}
	spans = rcv.WaitFor(t, 60*time.Second, "the dropped candidate's span", func(s []otlptest.Span) bool { return len(shadowSpans(s, "slow", coolTrace)) == 1 })
	cool := shadowSpans(spans, "slow", coolTrace)[0]
	wantAttrs(t, cool, map[string]any{"tollgate.shadow.dropped": "cooling_down", "tollgate.shadow": true})
	if _, ok := cool.Attributes["tollgate.shadow.divergence"]; ok {
		t.Errorf("a dropped evaluation has a divergence: %v", cool.Attributes)
	}
}

// With parentbased_always_off (trace only what the caller traces), the
// shadow evaluation of a request with a sampled traceparent is traced too
// (the sampler follows the link), and a request without one makes no span
// at all, nor does its shadow evaluation.
func TestTracingShadowFollowsTheRequestsSampling(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	pols := fmt.Sprintf("deny:\n  module: file://%s\n  settings: {mandatory_labels: [owner]}\n  shadow:\n    settings: {mandatory_labels: [owner, cost-center]}\n",
		wasmPath(t, "examples/required-labels"))
	h, _ := startTraced(t, rcv, pols, "OTEL_TRACES_SAMPLER", "parentbased_always_off")
	shadowsReady(t, h, "deny")
	owned := reviewFor("uid-owned", "CREATE", "default", pod(map[string]string{"owner": "me"}))
	// unsampled first: its shadow evaluation is done (counted) before the sampled request's
	if code, _ := h.postTraced("/validate/deny", owned, ""); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	eventually(t, "the first shadow evaluation", func() string {
		if n, _, _ := shadowTotals(t, h, "deny"); n != 1 {
			return fmt.Sprintf("%v shadow evaluations", n)
		}
		return ""
	})
	const traceID = "9bf92f3577b34da6a3ce929d0e0e4744"
	if code, _ := h.postTraced("/validate/deny", owned, "00-"+traceID+"-00f067aa0ba902b7-01"); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	spans := rcv.WaitFor(t, 60*time.Second, "the sampled request's shadow span", func(s []otlptest.Span) bool { return len(shadowSpans(s, "deny", traceID)) == 1 })
	sh := shadowSpans(spans, "deny", traceID)[0]
	wantAttrs(t, sh, map[string]any{"tollgate.shadow.divergence": "verdict"})
	// every span the receiver has is of the sampled request's trace or its shadow's
	for _, s := range spans {
		if s.TraceID != traceID && s.TraceID != sh.TraceID {
			t.Errorf("span %q of trace %s: the unsampled request or its shadow was traced", s.Name, s.TraceID)
		}
	}
}
