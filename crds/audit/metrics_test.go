package audit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// auditedSummary evaluates pods through a real HTTPS policy server (the serverEvaluator of
// TestServerEvaluator): "owner" rejects pods named bad-*, "flaky" cannot evaluate pods named
// bad-2, "quiet" matches nothing.
func auditedSummary(t *testing.T) *Summary {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rv struct{ Request struct{ Name string } }
		_ = json.NewDecoder(r.Body).Decode(&rv)
		name := rv.Request.Name
		switch {
		case r.URL.Path == "/audit/clusterwide-owner" && strings.HasPrefix(name, "bad-"):
			w.Write([]byte(`{"response":{"uid":"x","allowed":false,"status":{"code":422,"message":"no owner"}}}`))
		case r.URL.Path == "/audit/clusterwide-flaky" && name == "bad-2":
			w.Write([]byte(`{"response":{"uid":"x","allowed":false,"status":{"code":500,"message":"evaluation failed: wasm trap"}}}`))
		default:
			w.Write([]byte(`{"response":{"uid":"x","allowed":true}}`))
		}
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := certPEM(srv.Certificate().Raw)
	e := &serverEvaluator{namespace: "ns", o: ServerOptions{Timeout: 2 * time.Second, MaxConns: 4, ExtraCAs: [][]byte{caPEM}}, servers: map[string]*serverState{}}
	e.pool = mustPool(t, caPEM)
	e.servers["default"] = &serverState{base: srv.URL, http: e.newHTTPClient("example.com")}

	end := time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)
	o := Options{Evaluator: e, Now: func() time.Time { return end }}
	o.defaults()
	a := &auditor{o: &o, s: &Summary{}, ev: e}
	owner, flaky, quiet := cap("owner", nil, nil), cap("flaky", nil, nil), cap("quiet", nil, nil)
	a.s.Audited = []string{owner.ID, flaky.ID, quiet.ID}
	tg := target{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true}
	for _, name := range []string{"good-1", "bad-1", "bad-2", "good-2", "good-3"} {
		it := item{raw: json.RawMessage(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `"}}`), name: name, namespace: "shop", uid: "u-" + name}
		a.evaluate(context.Background(), tg, it, []*Policy{owner, flaky})
	}
	a.s.Duration, a.s.End = 1500*time.Millisecond, end
	return a.s
}

// TestAuditMetrics: after a pass the results gauge carries each policy's pass/fail/error counts
// (zeros for a policy that matched nothing), the duration is recorded, and the next pass
// replaces the gauge (a policy that left the audit leaves the metric).
func TestAuditMetrics(t *testing.T) {
	s := auditedSummary(t)
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	m.Observe(s, nil)
	want := `
# HELP tollgate_audit_results Results of the last full audit pass, by policy and result (pass, fail, error).
# TYPE tollgate_audit_results gauge
tollgate_audit_results{policy="clusterwide-flaky",result="error"} 1
tollgate_audit_results{policy="clusterwide-flaky",result="fail"} 0
tollgate_audit_results{policy="clusterwide-flaky",result="pass"} 4
tollgate_audit_results{policy="clusterwide-owner",result="error"} 0
tollgate_audit_results{policy="clusterwide-owner",result="fail"} 2
tollgate_audit_results{policy="clusterwide-owner",result="pass"} 3
tollgate_audit_results{policy="clusterwide-quiet",result="error"} 0
tollgate_audit_results{policy="clusterwide-quiet",result="fail"} 0
tollgate_audit_results{policy="clusterwide-quiet",result="pass"} 0
# HELP tollgate_audit_last_pass_duration_seconds Duration of the last full audit pass.
# TYPE tollgate_audit_last_pass_duration_seconds gauge
tollgate_audit_last_pass_duration_seconds 1.5
# HELP tollgate_audit_last_pass_timestamp_seconds Unix time the last full audit pass ended.
# TYPE tollgate_audit_last_pass_timestamp_seconds gauge
tollgate_audit_last_pass_timestamp_seconds 1.7957682e+09
# HELP tollgate_audit_passes_total Full audit passes, by outcome (ok, failed: one of its own steps failed).
# TYPE tollgate_audit_passes_total counter
tollgate_audit_passes_total{outcome="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tollgate_audit_results", "tollgate_audit_last_pass_duration_seconds", "tollgate_audit_last_pass_timestamp_seconds", "tollgate_audit_passes_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("duration histogram: %d series", n)
	}
	if s.Fail != 2 || s.Error != 1 || s.Pass != 7 || s.Evaluated != 5 {
		t.Errorf("totals %d pass %d fail %d error of %d", s.Pass, s.Fail, s.Error, s.Evaluated)
	}

	// the next pass audits "owner" only and fails a step: the gauge has only owner's series
	next := &Summary{Audited: []string{"clusterwide-owner"}, ByPolicy: map[string]*Counts{"clusterwide-owner": {Pass: 5}}, Duration: time.Second, End: s.End.Add(time.Hour)}
	m.Observe(next, context.DeadlineExceeded)
	if n := testutil.CollectAndCount(m.results); n != 3 {
		t.Errorf("after the second pass: %d result series, want 3", n)
	}
	if v := testutil.ToFloat64(m.results.WithLabelValues("clusterwide-owner", "fail")); v != 0 {
		t.Errorf("owner fail after the second pass: %v", v)
	}
	if v := testutil.ToFloat64(m.passes.WithLabelValues("failed")); v != 1 {
		t.Errorf("failed passes: %v", v)
	}
	// a pass that did not end is not recorded
	m.Observe(&Summary{Audited: []string{"x"}}, context.Canceled)
	if n := testutil.CollectAndCount(m.results); n != 3 {
		t.Errorf("an unfinished pass changed the gauge: %d series", n)
	}
}

// TestAuditStatusPatch: the merge patch names status.audit only, with the policy's counts and
// the pass's end time; a policy without results gets zeros.
func TestAuditStatusPatch(t *testing.T) {
	s := auditedSummary(t)
	b, err := auditStatusPatch(s, "clusterwide-owner")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":{"audit":{"lastAuditTime":"2026-11-27T08:30:00Z","violations":2,"errors":0,"passed":3}}}`; string(b) != want {
		t.Errorf("patch\n%s\nwant\n%s", b, want)
	}
	b, _ = auditStatusPatch(s, "clusterwide-flaky")
	if want := `{"status":{"audit":{"lastAuditTime":"2026-11-27T08:30:00Z","violations":0,"errors":1,"passed":4}}}`; string(b) != want {
		t.Errorf("patch\n%s\nwant\n%s", b, want)
	}
	b, _ = auditStatusPatch(s, "clusterwide-quiet")
	if want := `{"status":{"audit":{"lastAuditTime":"2026-11-27T08:30:00Z","violations":0,"errors":0,"passed":0}}}`; string(b) != want {
		t.Errorf("patch\n%s\nwant\n%s", b, want)
	}
}
