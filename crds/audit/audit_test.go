package audit

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	orv1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return m
}

func cap(name string, rules []v1.RuleWithOperations, mut func(*v1.ClusterAdmissionPolicy)) *Policy {
	p := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Rules = rules
	p.Status.PolicyStatus = v1.PolicyStatusActive
	if mut != nil {
		mut(p)
	}
	return NewPolicy(p)
}

func rule(ops []string, groups, versions, resources []string) v1.RuleWithOperations {
	r := v1.RuleWithOperations{APIGroups: groups, APIVersions: versions, Resources: resources}
	for _, o := range ops {
		r.Operations = append(r.Operations, v1.OperationType(o))
	}
	return r
}

// TestSelectPolicies: Kubewarden's skips (UPDATE-only rules, "*" rules, backgroundAudit false,
// not active), an unknown resource errors the policy, the user warning and the severity rules.
func TestSelectPolicies(t *testing.T) {
	pods := rule([]string{"CREATE", "UPDATE"}, []string{""}, []string{"v1"}, []string{"pods"})
	f := false
	all := []*Policy{
		cap("ok", []v1.RuleWithOperations{pods, rule([]string{"CREATE"}, []string{""}, []string{"v1"}, []string{"pods/exec", "namespaces"})}, func(p *v1.ClusterAdmissionPolicy) {
			p.Annotations = map[string]string{AnnotationSeverity: "high", AnnotationCategory: "PSP"}
		}),
		cap("update-only", []v1.RuleWithOperations{rule([]string{"UPDATE"}, []string{""}, []string{"v1"}, []string{"pods"})}, nil),
		cap("star", []v1.RuleWithOperations{rule([]string{"*"}, []string{"*"}, []string{"v1"}, []string{"pods"})}, nil),
		cap("star-op", []v1.RuleWithOperations{rule([]string{"*"}, []string{""}, []string{"v1"}, []string{"pods"})}, nil),
		cap("no-audit", []v1.RuleWithOperations{pods}, func(p *v1.ClusterAdmissionPolicy) { p.Spec.BackgroundAudit = &f }),
		cap("pending", []v1.RuleWithOperations{pods}, func(p *v1.ClusterAdmissionPolicy) { p.Status.PolicyStatus = v1.PolicyStatusPending }),
		cap("unknown", []v1.RuleWithOperations{rule([]string{"CREATE"}, []string{"example.com"}, []string{"v1"}, []string{"widgets"})}, nil),
		cap("monitor-user", []v1.RuleWithOperations{pods}, func(p *v1.ClusterAdmissionPolicy) {
			p.Spec.Mode = v1.ModeMonitor
			p.Spec.Settings.Raw = []byte(`{"allowed":"request.userInfo.username == 'admin'"}`)
			p.Annotations = map[string]string{AnnotationSeverity: "urgent"}
		}),
	}
	var s Summary
	got := selectPolicies(all, false, testMapper(), &s)
	ids := []string{}
	for _, p := range got {
		ids = append(ids, p.ID)
	}
	if strings.Join(ids, ",") != "clusterwide-ok,clusterwide-monitor-user" {
		t.Fatalf("audited %v", ids)
	}
	if len(got[0].rules) != 2 || got[0].rules[0].kind != "Pod" || got[0].rules[1].kind != "Namespace" || got[0].rules[1].namespaced {
		t.Errorf("targets of ok: %+v", got[0].rules)
	}
	if got[0].severity != "high" || got[0].category != "PSP" || got[1].severity != "info" {
		t.Errorf("severity/category: %q %q, monitor %q", got[0].severity, got[0].category, got[1].severity)
	}
	want := map[string]string{
		"clusterwide-update-only": "CREATE", "clusterwide-star": `"*"`, "clusterwide-star-op": `"*"`,
		"clusterwide-no-audit": "backgroundAudit", "clusterwide-pending": "pending",
	}
	for _, n := range s.Skipped {
		if !strings.Contains(n.Reason, want[n.Policy]) {
			t.Errorf("skip %s: %q, want it to say %s", n.Policy, n.Reason, want[n.Policy])
		}
		delete(want, n.Policy)
	}
	if len(want) > 0 {
		t.Errorf("not skipped: %v", want)
	}
	if len(s.Errored) != 1 || s.Errored[0].Policy != "clusterwide-unknown" || !strings.Contains(s.Errored[0].Reason, "example.com/v1/widgets") {
		t.Errorf("errored: %+v", s.Errored)
	}
	var user, sev bool
	for _, w := range s.Warnings {
		user = user || w.Policy == "clusterwide-monitor-user" && strings.Contains(w.Reason, "userInfo")
		sev = sev || w.Policy == "clusterwide-monitor-user" && strings.Contains(w.Reason, `"urgent"`)
	}
	if !user || !sev {
		t.Errorf("warnings %+v: want the userInfo one and the bad severity", s.Warnings)
	}
	// explicit policies (tollgate audit --policy) ignore backgroundAudit and status
	s = Summary{}
	if got := selectPolicies(all[4:6], true, testMapper(), &s); len(got) != 2 {
		t.Errorf("explicit: %d audited, skipped %+v", len(got), s.Skipped)
	}
}

func TestMatches(t *testing.T) {
	p := cap("x", []v1.RuleWithOperations{rule([]string{"CREATE"}, []string{""}, []string{"v1"}, []string{"pods", "namespaces"})}, func(p *v1.ClusterAdmissionPolicy) {
		p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"audit": "yes"}}
		p.Spec.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	})
	var s Summary
	selectPolicies([]*Policy{p}, false, testMapper(), &s)
	pods, nss := p.rules[0], p.rules[1]
	for _, tc := range []struct {
		t           target
		ns, obj     map[string]string
		want        bool
		description string
	}{
		{pods, map[string]string{"audit": "yes"}, nil, true, "namespace selected"},
		{pods, map[string]string{"audit": "no"}, nil, false, "namespace not selected"},
		{pods, map[string]string{"audit": "yes"}, map[string]string{"skip": ""}, false, "object not selected"},
		{nss, nil, map[string]string{"audit": "yes"}, true, "a Namespace by its own labels"},
		{nss, nil, nil, false, "a Namespace without the label"},
		{target{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespaced: true, kind: "Deployment"}, map[string]string{"audit": "yes"}, nil, false, "another resource"},
	} {
		if got, err := p.matches(tc.t, tc.ns, tc.obj); got != tc.want || err != nil {
			t.Errorf("%s: %v %v, want %v", tc.description, got, err, tc.want)
		}
	}
}

func TestBuildReview(t *testing.T) {
	tg := target{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, kind: "Deployment", namespaced: true}
	b := buildReview(tg, item{raw: json.RawMessage(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}`), name: "d", namespace: "ns", uid: "u-1"})
	var rv struct {
		APIVersion, Kind string
		Request          struct {
			UID       string
			Operation string
			Namespace string
			Name      string
			Kind      map[string]string
			Resource  map[string]string
			UserInfo  map[string]any
			Object    map[string]any
			OldObject any
		}
	}
	if err := json.Unmarshal(b, &rv); err != nil {
		t.Fatal(err)
	}
	r := rv.Request
	if rv.APIVersion != "admission.k8s.io/v1" || rv.Kind != "AdmissionReview" || r.UID != "u-1" || r.Operation != "CREATE" || r.Namespace != "ns" || r.Name != "d" ||
		r.Kind["kind"] != "Deployment" || r.Kind["group"] != "apps" || r.Resource["resource"] != "deployments" || r.UserInfo == nil || len(r.UserInfo) != 0 ||
		r.Object["kind"] != "Deployment" || r.OldObject != nil {
		t.Errorf("review %s", b)
	}
}

// TestServerEvaluator: the verdicts of a real HTTPS server, verified for the Service's name
// with the given CA, and a server that goes down.
func TestServerEvaluator(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/audit/clusterwide-pass":
			w.Write([]byte(`{"response":{"uid":"x","allowed":true}}`))
		case "/audit/clusterwide-fail":
			w.Write([]byte(`{"response":{"uid":"x","allowed":false,"status":{"code":422,"message":"no owner"}}}`))
		case "/audit/clusterwide-trap":
			w.Write([]byte(`{"response":{"uid":"x","allowed":false,"status":{"code":500,"message":"policy clusterwide-trap: evaluation failed: wasm trap"}}}`))
		case "/audit/clusterwide-notloaded":
			w.WriteHeader(500)
			w.Write([]byte(`{"response":{"uid":"x","allowed":false,"status":{"code":500,"message":"policy clusterwide-notloaded is not loaded: 404"}}}`))
		default:
			http.Error(w, "no policy "+r.URL.Path+" "+string(body[:0]), 404)
		}
	}))
	srv.StartTLS()
	defer srv.Close()
	// the server's certificate names example.com; tell the client the Service is "example.com"
	caPEM := certPEM(srv.Certificate().Raw)
	e := &serverEvaluator{namespace: "ns", o: ServerOptions{Timeout: 2 * time.Second, MaxConns: 4, ExtraCAs: [][]byte{caPEM}}, servers: map[string]*serverState{}}
	e.pool = mustPool(t, caPEM)
	st := &serverState{base: srv.URL, http: e.newHTTPClient("example.com")}
	e.servers["default"] = st
	ctx := context.Background()
	for id, want := range map[string]Verdict{
		"pass": {Pass, ""}, "fail": {Fail, "no owner"}, "trap": {Error, "wasm trap"}, "notloaded": {Error, "is not loaded"}, "missing": {Error, "HTTP 404"},
	} {
		p := cap(id, nil, nil)
		got := e.Evaluate(ctx, p, []byte(`{}`))
		if got.Outcome != want.Outcome || !strings.Contains(got.Message, want.Message) {
			t.Errorf("%s: %+v, want %+v", id, got, want)
		}
	}
	// the wrong name: a TLS error, an Error result
	e.servers["other"] = &serverState{base: srv.URL, http: e.newHTTPClient("policy-server-other.ns.svc")}
	p := cap("pass", nil, nil)
	p.Server = "other"
	if v := e.Evaluate(ctx, p, []byte(`{}`)); v.Outcome != Error || !strings.Contains(v.Message, "certificate") {
		t.Errorf("wrong server name: %+v", v)
	}
	// down: after downAfter transport errors the rest fail at once with the reason
	srv.Close()
	before := calls.Load()
	p.Server = "default"
	for i := 0; i < downAfter+3; i++ {
		v := e.Evaluate(ctx, p, []byte(`{}`))
		if v.Outcome != Error {
			t.Fatalf("server down: %+v", v)
		}
		if i == downAfter+2 && !strings.Contains(v.Message, "unreachable") {
			t.Errorf("after %d failures: %q, want it marked unreachable", i+1, v.Message)
		}
	}
	if calls.Load() != before {
		t.Errorf("calls reached a closed server")
	}
}

func TestReportBuildKeepsTimestamps(t *testing.T) {
	p := cap("labels", nil, func(p *v1.ClusterAdmissionPolicy) { p.Generation = 3; p.UID = "pu" })
	w := &reportWriter{api: reportAPI{gv: orv1.SchemeGroupVersion, kind: "Report", clusterKind: "ClusterReport"}, policies: map[string]*Policy{p.ID: p}, skipped: 2}
	ref := ObjectRef{APIVersion: "v1", Kind: "Pod", Namespace: "shop", Name: "web", UID: "u1", ResourceVersion: "7"}
	t1 := time.Unix(1000, 0)
	o := &objectResults{ref: ref, results: []Result{{Policy: p.ID, Object: ref, Outcome: Fail, Message: "no owner", Time: t1}}}
	r1 := w.build(o, "shop", nil)
	if r1.Name != "u1" || r1.Namespace != "shop" || r1.Kind != "Report" || r1.Summary != (orv1.ReportSummary{Fail: 1, Skip: 2}) ||
		r1.Results[0].Timestamp.Seconds != 1000 || r1.Results[0].Properties["policy-generation"] != "3" || r1.OwnerReferences[0].UID != "u1" {
		t.Fatalf("report %+v", r1)
	}
	o.results[0].Time = time.Unix(2000, 0)
	r2 := w.build(o, "shop", r1)
	if !sameReport(r1, r2) {
		t.Errorf("the same result an hour later rewrites the report: %+v", r2.Results)
	}
	o.results[0].Outcome, o.results[0].Message = Pass, ""
	r3 := w.build(o, "shop", r1)
	if sameReport(r1, r3) || r3.Results[0].Timestamp.Seconds != 2000 || r3.Summary.Pass != 1 {
		t.Errorf("a changed result: %+v", r3)
	}
	if c := w.build(o, "", nil); c.Kind != "ClusterReport" || c.Namespace != "" {
		t.Errorf("cluster report kind %q", c.Kind)
	}
}

func mustPool(t *testing.T, pem []byte) *x509CertPool {
	t.Helper()
	p := newPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate")
	}
	return p
}

var _ = tls.VersionTLS12

// TestServerEvaluatorRetriesDial: a policy server whose address does not take connections yet
// (a Service kube-proxy has not programmed, a pod just becoming ready) gets its request when it
// starts within the retries: the result is its answer, not an error.
func TestServerEvaluatorRetriesDial(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Write([]byte(`{"response":{"uid":"x","allowed":true}}`))
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens at addr: connections are refused until the forwarder below starts
	caPEM := certPEM(srv.Certificate().Raw)
	e := &serverEvaluator{namespace: "ns", o: ServerOptions{Timeout: 2 * time.Second, MaxConns: 4, ExtraCAs: [][]byte{caPEM}}, servers: map[string]*serverState{}}
	e.pool = mustPool(t, caPEM)
	e.servers["default"] = &serverState{base: "https://" + addr, http: e.newHTTPClient("example.com")}
	started := make(chan net.Listener, 1)
	go func() { // 400 ms late, addr starts forwarding to the server
		time.Sleep(400 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			close(started)
			return
		}
		started <- ln
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					return
				}
				defer b.Close()
				go io.Copy(b, c)
				io.Copy(c, b)
			}()
		}
	}()
	v := e.Evaluate(context.Background(), cap("pass", nil, nil), []byte(`{}`))
	if ln, ok := <-started; ok {
		ln.Close()
	}
	if v.Outcome != Pass || calls.Load() != 1 {
		t.Fatalf("a server that starts 400 ms late: %+v after %d calls, want pass after 1", v, calls.Load())
	}
}
