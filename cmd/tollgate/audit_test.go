package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/crds/audit"
)

// TestAuditBadInput: every bad flag or manifest of tollgate audit is an error that names the
// flag, file or field, before anything is sent to a cluster.
func TestAuditBadInput(t *testing.T) {
	w := fileWriter(t, t.TempDir())
	kubeconfig := w("kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	policy := func(kind, meta, rules string) string {
		return w(kind+".yaml", "apiVersion: policies.tollgate.dev/v1\nkind: "+kind+"\nmetadata: "+meta+"\nspec:\n  module: "+
			ex("required-labels/policy.wasm")+"\n  mutating: false\n"+rules)
	}
	rules := "  rules: [{apiGroups: [\"\"], apiVersions: [v1], resources: [pods], operations: [CREATE]}]\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--parallel-policies", "0"}, "--parallel-policies: 0: want 1 or more"},
		{[]string{"--page-size", "0"}, "--page-size: 0"},
		{[]string{"--report-kind", "wgpolicy"}, `--report-kind: "wgpolicy": want openreports or policyreport`},
		{[]string{"-c", "-n", "shop"}, "--cluster and --namespace exclude each other"},
		{[]string{"-o", "csv"}, `unknown output format "csv"`},
		{[]string{"--log-level", "loud"}, "--log-level=loud: must be trace, debug, info, warn or error"},
		{[]string{"--extra-ca", "/nonexistent/ca.pem", "--kubeconfig", kubeconfig}, "--extra-ca: open /nonexistent/ca.pem"},
		{[]string{"--client-cert", "c.pem"}, "client-cert client-key"},
		{[]string{"--watch", "--disable-store", "--kubeconfig", kubeconfig}, "--watch keeps reports fresh"},
		{[]string{"--metrics-addr", ":0"}, "--metrics-addr needs --watch"},
		{[]string{"--watch", "--metrics-addr", "127.0.0.1:99999", "--kubeconfig", kubeconfig}, "--metrics-addr: listen tcp: address 99999: invalid port"},
		{[]string{"--policy", "/nonexistent/p.yaml", "--kubeconfig", kubeconfig}, "/nonexistent/p.yaml"},
		{[]string{"--compare", "--kubeconfig", kubeconfig}, "--compare needs --policy"},
		{[]string{"--policy", policy("AdmissionPolicy", "{name: ap}", rules), "--kubeconfig", kubeconfig}, "an AdmissionPolicy needs metadata.namespace"},
		{[]string{"--policy", policy("ClusterAdmissionPolicyGroup", "{name: g}", rules), "--kubeconfig", kubeconfig}, "a policy group cannot be run as one module"},
		{[]string{"--policy", policy("ClusterAdmissionPolicy", "{name: norules}", ""), "--kubeconfig", kubeconfig}, "spec.rules is empty: nothing to audit"},
	} {
		out, err := tollgate(t, "", append([]string{"audit"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+out, tc.want) {
			t.Errorf("tollgate audit %s: %v\n%s\nwant an error with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}

// TestAuditMetricsServed: --metrics-addr's server answers GET /metrics with the audit's metrics
// after a pass is observed, and stops when told.
func TestAuditMetricsServed(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := audit.NewMetrics(reg)
	addr, stop, err := serveAuditMetrics("127.0.0.1:0", reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(&audit.Summary{Audited: []string{"clusterwide-p"}, ByPolicy: map[string]*audit.Counts{"clusterwide-p": {Pass: 3, Fail: 2}}, Duration: time.Second, End: time.Now()}, nil)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tollgate_audit_results{policy="clusterwide-p",result="fail"} 2`, `tollgate_audit_results{policy="clusterwide-p",result="pass"} 3`, "tollgate_audit_pass_duration_seconds_count 1"} {
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics: %d, no %q in\n%s", resp.StatusCode, want, body)
		}
	}
	stop()
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("the metrics server still answers after stop")
	}
}
