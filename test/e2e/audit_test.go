package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

var (
	reportGVR        = schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "reports"}
	clusterReportGVR = schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "clusterreports"}
)

// auditResult is one result of a report, as the test reads it.
type auditResult struct {
	Policy, Result, Message, Severity, Category string
	Seconds                                     int64
}

// TestAuditOnRealNode: the chart (its CronJob, RBAC and the OpenReports CRDs) and the operator's
// policy server on the real node; existing compliant and violating ConfigMaps in several
// namespaces and Namespaces (cluster scope) are audited by a Job made from the chart's CronJob,
// which writes one Report per object and a ClusterReport per Namespace with the right results;
// a policy edit, an object deletion and a policy deletion show on the next run (tollgate audit
// from here); a run that changes nothing writes nothing; a policy server that cannot be reached
// gives error results and exit status 0; tollgate audit --policy runs a manifest locally.
func TestAuditOnRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cs := env.cluster.Client
	// the Job's pod has no cluster DNS here: it dials the Services' ClusterIPs
	op := startOperator(t, ctx, "--set-json", `audit.extraArgs=["--service-ip"]`)
	const server = "audit"
	module := policyRef(t, "required-labels")

	// the objects exist before the policies do: the audit finds them
	nsLabels := map[string]map[string]string{
		"audit-a": {"e2e-audit": "yes", "owner": "me"}, // selected, compliant Namespace
		"audit-b": {"e2e-audit": "yes"},                // selected, violating Namespace
		"audit-c": {},                                  // not selected by the policies
	}
	for ns, l := range nsLabels {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: l}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for ns := range nsLabels {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	})
	cms := map[string]map[string]string{
		"audit-a/good": {"owner": "a"}, "audit-a/bad": nil,
		"audit-b/bad": {"team": "x"}, "audit-b/both": {"owner": "b"},
		"audit-c/bad": nil,
	}
	uid := map[string]types.UID{}
	for key, l := range cms {
		ns, name, _ := strings.Cut(key, "/")
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uid[key] = cm.UID
	}
	for ns := range nsLabels {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uid[ns] = n.UID
	}

	apply(t, ctx, policyServerYAML(server, 1, ""))
	capYAML := func(name, resources, ops, extra string) string {
		return fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: %s
  annotations:
    io.kubewarden.policy.severity: high
    io.kubewarden.policy.category: compliance
spec:
  policyServer: %s
  module: %s
  mutating: false
  rules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [%s]
      operations: [%s]
  namespaceSelector:
    matchLabels: {e2e-audit: "yes"}
%s`, name, server, module, resources, ops, extra)
	}
	apply(t, ctx, capYAML("audit-labels", "configmaps", "CREATE", "  settings: {mandatory_labels: [owner]}\n"))
	apply(t, ctx, capYAML("audit-ns", "namespaces", "CREATE, UPDATE", "  settings: {mandatory_labels: [owner]}\n"))
	apply(t, ctx, capYAML("audit-update-only", "configmaps", "UPDATE", "  settings: {mandatory_labels: [owner]}\n"))
	apply(t, ctx, capYAML("audit-off", "configmaps", "CREATE", "  settings: {mandatory_labels: [nobody]}\n  backgroundAudit: false\n"))
	apply(t, ctx, fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: AdmissionPolicy
metadata:
  name: audit-team
  namespace: audit-b
spec:
  policyServer: %s
  module: %s
  mutating: false
  settings: {mandatory_labels: [team]}
  rules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [configmaps]
      operations: [CREATE]
`, server, module))
	t.Cleanup(func() {
		op.deleteAll(t, []string{"ClusterAdmissionPolicy/audit-labels", "ClusterAdmissionPolicy/audit-ns", "ClusterAdmissionPolicy/audit-update-only",
			"ClusterAdmissionPolicy/audit-off", "AdmissionPolicy/audit-b/audit-team", "PolicyServer/" + server})
	})
	for _, p := range []string{"audit-labels", "audit-ns", "audit-update-only", "audit-off"} {
		op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", p, "active", 3*time.Minute)
	}
	op.waitStatus(t, ctx, "AdmissionPolicy", "audit-b", "audit-team", "active", time.Minute)

	// A tenant's forged report: before the audit ever ran, a passing Report at the name the
	// audit's report of audit-b/bad takes (its UID), without the audit's label. The audit must
	// write its failing result over it, not skip it.
	forged := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": reportGVR.GroupVersion().String(), "kind": "Report",
		"metadata": map[string]any{"name": string(uid["audit-b/bad"]), "namespace": "audit-b", "labels": map[string]any{"made-by": "tenant"}},
		"source":   "tenant",
		"summary":  map[string]any{"pass": int64(2)},
		"results": []any{
			map[string]any{"source": "tollgate", "policy": "clusterwide-audit-labels", "result": "pass", "scored": true},
			map[string]any{"source": "tollgate", "policy": "namespaced-audit-b-audit-team", "result": "pass", "scored": true},
		},
	}}
	if _, err := op.dyn.Resource(reportGVR).Namespace("audit-b").Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant's forged report: %v", err)
	}

	// 1. the chart's CronJob, run now as a Job in the cluster with its ServiceAccount
	begin := time.Now()
	if _, _, err := env.cluster.Kubectl(ctx, "-n", controllerNS, "create", "job", "audit-now", "--from=cronjob/tollgate-audit"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.cluster.Kubectl(ctx, "-n", controllerNS, "wait", "--for=condition=complete", "--timeout=150s", "job/audit-now"); err != nil {
		logs, _, _ := env.cluster.Kubectl(ctx, "-n", controllerNS, "logs", "job/audit-now", "--tail=40")
		t.Fatalf("the audit Job did not complete: %v\n%s\n%s", err, logs, podsState(ctx, cs, controllerNS, &metav1.LabelSelector{MatchLabels: map[string]string{"job-name": "audit-now"}}))
	}
	logs, _, _ := env.cluster.Kubectl(ctx, "-n", controllerNS, "logs", "job/audit-now")
	t.Logf("audit Job complete %v after its creation; its summary: %s", time.Since(begin).Round(time.Millisecond), lastLine(logs))
	if !strings.Contains(lastLine(logs), "1 updated over a report the audit did not write") {
		t.Errorf("the audit's summary does not count the forged report it replaced: %s", lastLine(logs))
	}

	labels, ns := "clusterwide-audit-labels", "clusterwide-audit-ns"
	team := "namespaced-audit-b-audit-team"
	want := map[string]map[string]string{ // object -> policy -> result
		"audit-a/good": {labels: "pass"},
		"audit-a/bad":  {labels: "fail"},
		"audit-b/bad":  {labels: "fail", team: "pass"},
		"audit-b/both": {labels: "pass", team: "fail"},
		"audit-a":      {ns: "pass"},
		"audit-b":      {ns: "fail"},
	}
	got := readReports(t, ctx, op, uid)
	checkResults(t, got, want)
	if _, ok := got["audit-c/bad"]; ok {
		t.Errorf("audit-c is not selected by the policies, yet its ConfigMap has a report: %+v", got["audit-c/bad"])
	}
	if _, ok := got["audit-c"]; ok {
		t.Errorf("Namespace audit-c is not selected, yet it has a ClusterReport")
	}
	firstNS := got["audit-a"][ns].Seconds
	bad := got["audit-a/bad"][labels]
	if !strings.Contains(bad.Message, `mandatory label "owner"`) || bad.Severity != "high" || bad.Category != "compliance" || bad.Seconds == 0 {
		t.Errorf("audit-a/bad: %+v: want the policy's message, severity high, category compliance and a timestamp", bad)
	}
	rep, err := op.dyn.Resource(reportGVR).Namespace("audit-a").Get(ctx, string(uid["audit-a/bad"]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	skip, _, _ := unstructured.NestedInt64(rep.Object, "summary", "skip")
	fail, _, _ := unstructured.NestedInt64(rep.Object, "summary", "fail")
	scopeName, _, _ := unstructured.NestedString(rep.Object, "scope", "name")
	owners := rep.GetOwnerReferences()
	if fail != 1 || skip < 2 || scopeName != "bad" || len(owners) != 1 || owners[0].UID != uid["audit-a/bad"] || rep.GetLabels()["app.kubernetes.io/managed-by"] != "tollgate" {
		t.Errorf("report of audit-a/bad: summary fail %d skip %d (want 1, >= 2 skipped policies), scope %q, owners %+v, labels %v", fail, skip, scopeName, owners, rep.GetLabels())
	}

	// the Job (with the chart's RBAC) wrote each audited policy's status.audit: the counts of its
	// results in the reports (the namespaces may hold ConfigMaps the test did not create)
	for _, tc := range []struct {
		kind, ns, name, id string
	}{
		{"ClusterAdmissionPolicy", "", "audit-labels", labels},
		{"ClusterAdmissionPolicy", "", "audit-ns", ns},
		{"AdmissionPolicy", "audit-b", "audit-team", team},
	} {
		c := countResults(t, ctx, op, tc.id)
		if c["fail"] == 0 || c["pass"] == 0 {
			t.Errorf("%s: results in the reports %v: want some fail and some pass", tc.id, c)
		}
		ri := op.dyn.Resource(policyGVR[tc.kind]).Namespace(tc.ns)
		u, err := ri.Get(ctx, tc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, _, _ := unstructured.NestedMap(u.Object, "status", "audit")
		ps, _, _ := unstructured.NestedString(u.Object, "status", "policyStatus")
		at, _ := a["lastAuditTime"].(string)
		when, perr := time.Parse(time.RFC3339, at)
		if a["violations"] != c["fail"] || a["errors"] != c["error"] || a["passed"] != c["pass"] || perr != nil || when.Before(begin.Add(-time.Second)) || ps != "active" {
			t.Errorf("%s %s status.audit %v (policyStatus %q), want violations %d errors %d passed %d (the reports'), lastAuditTime after %s, policyStatus active",
				tc.kind, tc.name, a, ps, c["fail"], c["error"], c["pass"], begin.UTC().Format(time.RFC3339))
		}
	}

	// 2. nothing changed: a second run writes nothing
	out := runAudit(t, ctx)
	if !strings.Contains(out, " 0 created, 0 updated, 0 deleted") {
		t.Errorf("an unchanged cluster was written to: %s", lastLine(out))
	}

	// 3. a policy edit: audit-a/good now fails; an object and a policy deleted: their results go
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "audit-labels", `{"settings": {"mandatory_labels": ["owner", "tier"]}}`)
	if err := cs.CoreV1().ConfigMaps("audit-a").Delete(ctx, "bad", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	op.deleteAll(t, []string{"AdmissionPolicy/audit-b/audit-team"})
	eventually(t, 2*time.Minute, func() error { // until the policy server serves the edit
		out = runAudit(t, ctx)
		got = readReports(t, ctx, op, uid)
		if r := got["audit-a/good"][labels]; r.Result != "fail" || !strings.Contains(r.Message, "tier") {
			return fmt.Errorf("audit-a/good: %+v, want a failure naming the label tier", r)
		}
		return nil
	})
	want = map[string]map[string]string{
		"audit-a/good": {labels: "fail"},
		"audit-b/bad":  {labels: "fail"},
		"audit-b/both": {labels: "fail"},
		"audit-a":      {ns: "pass"},
		"audit-b":      {ns: "fail"},
	}
	checkResults(t, got, want)
	if _, ok := got["audit-a/bad"]; ok {
		t.Errorf("the deleted ConfigMap audit-a/bad still has a report")
	}
	if s := got["audit-a"][ns].Seconds; s != firstNS || s == 0 {
		t.Errorf("the unchanged result of Namespace audit-a has the timestamp %d, want the first run's %d", s, firstNS)
	}

	// 4. a policy server that cannot be reached: error results, exit status 0
	jsonOut, err := exec.CommandContext(ctx, env.bin, "audit", "--kubeconfig", env.cluster.Kubeconfig, "--tollgate-namespace", controllerNS,
		"--policy-server-url", "https://127.0.0.1:1", "--disable-store", "-o", "json", "-n", "audit-a").Output()
	if err != nil {
		t.Fatalf("tollgate audit with a server that is down: %v (want exit status 0: not its own failure)", err)
	}
	var res struct {
		Results []struct {
			Policy, Result, Message string
		}
	}
	if err := json.Unmarshal(jsonOut, &res); err != nil || len(res.Results) == 0 {
		t.Fatalf("-o json: %v: %s", err, jsonOut)
	}
	for _, r := range res.Results {
		if r.Result != "error" || !strings.Contains(r.Message, "connect") {
			t.Errorf("server down: %+v, want an error naming the connection", r)
		}
	}

	// 5. for authors: a manifest's module run here, results printed, no report written
	manifest := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata:
  name: try-me
spec:
  module: %s
  settings: {mandatory_labels: [team]}
  mutating: false
  rules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [configmaps]
      operations: [CREATE]
  namespaceSelector:
    matchLabels: {e2e-audit: "yes"}
`, filepath.Join(env.root, "examples", "required-labels", "policy.wasm"))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, env.bin, "audit", "--policy", manifest, "--kubeconfig", env.cluster.Kubeconfig, "--tollgate-namespace", controllerNS)
	table, err := cmd.Output()
	if err != nil {
		t.Fatalf("tollgate audit --policy: %v", err)
	}
	for _, row := range []string{`audit-b +ConfigMap +bad +clusterwide-try-me +pass`, `audit-b +ConfigMap +both +clusterwide-try-me +fail +.*mandatory label "team"`, `audit-a +ConfigMap +good +clusterwide-try-me +fail`} {
		if !regexp.MustCompile(row).Match(table) {
			t.Errorf("tollgate audit --policy: no row %q in\n%s", row, table)
		}
	}
	if strings.Contains(string(table), "audit-c") {
		t.Errorf("tollgate audit --policy audited audit-c, which the namespaceSelector leaves out:\n%s", table)
	}
	after := readReports(t, ctx, op, uid)
	if _, ok := after["audit-b/both"]["clusterwide-try-me"]; ok {
		t.Errorf("tollgate audit --policy wrote a report")
	}

	// 6. the incremental mode: objects created after the full pass get their report within
	// seconds, and a policy edit starts a new full pass by itself
	wlog := &testfixture.SyncBuffer{}
	watcher := exec.CommandContext(ctx, env.bin, append(auditArgs(t, ctx), "--watch")...)
	watcher.Stdout, watcher.Stderr = wlog, wlog
	if err := watcher.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = watcher.Process.Signal(os.Interrupt)
		_ = watcher.Wait()
		if t.Failed() {
			t.Logf("tollgate audit --watch:\n%s", wlog.String())
		}
	}()
	eventually(t, time.Minute, func() error {
		if !strings.Contains(wlog.String(), "tollgate audit: ") {
			return fmt.Errorf("no full pass yet")
		}
		return nil
	})
	time.Sleep(time.Second) // the watches start after the pass
	// At admission audit-labels sees CREATE only, so a ConfigMap is created compliant (its report
	// appears: pass), then its label tier is removed by an update, which only the audit sees.
	var created, broken []time.Duration
	for i := range 5 {
		begin := time.Now()
		cm, err := cs.CoreV1().ConfigMaps("audit-b").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("late-%d", i),
			Labels: map[string]string{"owner": "x", "tier": "y", "nobody": "z"}}}, metav1.CreateOptions{}) // audit-off enforces "nobody"
		if err != nil {
			t.Fatal(err)
		}
		waitResult := func(want string) {
			eventually(t, 30*time.Second, func() error {
				r := readReports(t, ctx, op, map[string]types.UID{"audit-b/late": cm.UID})["audit-b/late"][labels]
				if r.Result != want {
					return fmt.Errorf("late ConfigMap %d: %+v, want %s", i, r, want)
				}
				return nil
			})
		}
		waitResult("pass")
		created = append(created, time.Since(begin))
		begin = time.Now()
		delete(cm.Labels, "tier") // audit-update-only checks owner on UPDATE; audit-labels wants tier too
		if _, err := cs.CoreV1().ConfigMaps("audit-b").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitResult("fail")
		broken = append(broken, time.Since(begin))
	}
	for _, l := range [][]time.Duration{created, broken} {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	}
	t.Logf("incremental audit: a new ConfigMap in its Report after p50 %v (max %v); a ConfigMap made violating after p50 %v (max %v); 5 each",
		created[2].Round(time.Millisecond), created[4].Round(time.Millisecond), broken[2].Round(time.Millisecond), broken[4].Round(time.Millisecond))
	if broken[2] > 5*time.Second || created[2] > 5*time.Second {
		t.Errorf("incremental audit p50 %v / %v, want <= 5 s", created[2], broken[2])
	}
	passes := strings.Count(wlog.String(), "tollgate audit: ")
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "audit-labels", `{"settings": {"mandatory_labels": ["owner"]}}`)
	eventually(t, 2*time.Minute, func() error {
		if r := readReports(t, ctx, op, uid)["audit-a/good"][labels]; r.Result != "pass" {
			return fmt.Errorf("audit-a/good: %+v after the policy edit, want pass (passes: %d before the edit, %d now)", r, passes, strings.Count(wlog.String(), "tollgate audit: "))
		}
		return nil
	})

	// 7. the legacy reports: wgpolicyk8s.io PolicyReport (a permissive CRD of that group here:
	// the chart installs only OpenReports')
	legacy := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: policyreports.wgpolicyk8s.io}
spec:
  group: wgpolicyk8s.io
  scope: Namespaced
  names: {kind: PolicyReport, plural: policyreports, singular: policyreport, listKind: PolicyReportList}
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
	apply(t, ctx, legacy)
	t.Cleanup(func() {
		_, _, _ = env.cluster.Kubectl(context.Background(), "delete", "crd", "policyreports.wgpolicyk8s.io", "--ignore-not-found")
	})
	if _, _, err := env.cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/policyreports.wgpolicyk8s.io"); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(ctx, env.bin, append(auditArgs(t, ctx), "--report-kind", "policyreport", "-n", "audit-b")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tollgate audit --report-kind policyreport: %v\n%s", err, out)
	}
	polr := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1beta1", Resource: "policyreports"}
	pr, err := op.dyn.Resource(polr).Namespace("audit-b").Get(ctx, string(uid["audit-b/bad"]), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the PolicyReport of audit-b/bad: %v", err)
	}
	results, _, _ := unstructured.NestedSlice(pr.Object, "results")
	if pr.GetKind() != "PolicyReport" || len(results) != 1 || results[0].(map[string]any)["policy"] != labels || results[0].(map[string]any)["result"] != "fail" {
		t.Errorf("PolicyReport of audit-b/bad: kind %s, results %v", pr.GetKind(), results)
	}

	// 8. the chart's watch mode (audit.mode=watch): `tollgate audit --watch` as a Deployment with
	// the audit's ServiceAccount; a violating object created now is in its Report within
	// seconds, and the pod serves the audit's metrics.
	_ = watcher.Process.Signal(os.Interrupt) // one auditor at a time, as the chart's Recreate strategy
	_ = watcher.Wait()
	begin = time.Now()
	if out, err := helm(ctx, "upgrade", release, filepath.Join(env.root, "charts", "tollgate"), "--namespace", controllerNS, "--reuse-values",
		"--set", "audit.mode=watch", "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("helm upgrade --set audit.mode=watch: %v\n%s%s", err, out, podsStateOf(ctx, cs, controllerNS, "tollgate-audit"))
	}
	t.Logf("audit.mode=watch: the audit Deployment Ready %v after the upgrade began", time.Since(begin).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			logs, _, _ := env.cluster.Kubectl(context.Background(), "-n", controllerNS, "logs", "deploy/tollgate-audit", "--tail=40")
			t.Logf("--- the audit pod's log ---\n%s", logs)
		}
	}()
	if _, err := cs.BatchV1().CronJobs(controllerNS).Get(ctx, "tollgate-audit", metav1.GetOptions{}); err == nil {
		t.Error("audit.mode=watch left the CronJob")
	}
	apods, err := serverPods(ctx, cs, controllerNS, "tollgate-audit")
	if err != nil || len(apods) != 1 || apods[0].Spec.ServiceAccountName != "tollgate-audit" || apods[0].Status.PodIP == "" {
		t.Fatalf("the audit Deployment's pods: %v %v", apods, err)
	}
	eventually(t, time.Minute, func() error { // its first full pass wrote status.audit again
		logs, _, _ := env.cluster.Kubectl(ctx, "-n", controllerNS, "logs", "deploy/tollgate-audit")
		if !strings.Contains(logs, "tollgate audit: ") {
			return fmt.Errorf("no full pass in the audit pod's log yet:\n%s", logs)
		}
		return nil
	})
	// a new object gets its Report from the pod's watch; a policy edit makes the pod run a full
	// pass that turns it into a violation
	begin = time.Now()
	late, err := cs.CoreV1().ConfigMaps("audit-b").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late-watch",
		Labels: map[string]string{"owner": "o", "nobody": "z"}}}, metav1.CreateOptions{}) // audit-off enforces "nobody"
	if err != nil {
		t.Fatal(err)
	}
	lateResult := func(want string) {
		eventually(t, 30*time.Second, func() error {
			r := readReports(t, ctx, op, map[string]types.UID{"audit-b/late-watch": late.UID})["audit-b/late-watch"][labels]
			if r.Result != want {
				return fmt.Errorf("late-watch: %+v, want %s", r, want)
			}
			return nil
		})
	}
	lateResult("pass")
	t.Logf("audit.mode=watch: a new ConfigMap in its Report %v after its creation", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "audit-labels", `{"settings": {"mandatory_labels": ["owner", "reviewed"]}}`)
	lateResult("fail")
	t.Logf("audit.mode=watch: the ConfigMap's Report says fail %v after the policy edit", time.Since(begin).Round(time.Millisecond))
	murl := fmt.Sprintf("http://%s:%d/metrics", apods[0].Status.PodIP, containerPort(&apods[0], "metrics"))
	eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(murl)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if want := `tollgate_audit_results{policy="` + labels + `",result="fail"}`; !strings.Contains(string(body), want) {
			return fmt.Errorf("%s has no %s:\n%s", murl, want, body)
		}
		return nil
	})
}

// runAudit runs tollgate audit from the test and returns its output. The node's network has no
// route to the Service range (pods have one), so it is sent to the policy server pod's address
// with --policy-server-url; the certificate is still verified for the Service's name.
func runAudit(t *testing.T, ctx context.Context) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, env.bin, auditArgs(t, ctx)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tollgate audit: %v\n%s", err, out)
	}
	return string(out)
}

// auditArgs are tollgate audit's arguments for a run from the test.
func auditArgs(t *testing.T, ctx context.Context) []string {
	t.Helper()
	pods, err := serverPods(ctx, env.cluster.Client, controllerNS, "policy-server-audit")
	if err != nil || len(pods) == 0 || pods[0].Status.PodIP == "" {
		t.Fatalf("the policy server's pod: %v %v", pods, err)
	}
	url := fmt.Sprintf("https://%s:%d", pods[0].Status.PodIP, containerPort(&pods[0], "policy-server"))
	return []string{"audit", "--kubeconfig", env.cluster.Kubeconfig, "--tollgate-namespace", controllerNS, "--policy-server-url", url}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// readReports returns the results of the reports of the objects in uid, keyed "ns/name" for
// ConfigMaps (Reports) and "name" for Namespaces (ClusterReports), then by policy.
func readReports(t *testing.T, ctx context.Context, op *operator, uid map[string]types.UID) map[string]map[string]auditResult {
	t.Helper()
	out := map[string]map[string]auditResult{}
	for key, u := range uid {
		ns, _, namespaced := strings.Cut(key, "/")
		var obj *unstructured.Unstructured
		var err error
		if namespaced {
			obj, err = op.dyn.Resource(reportGVR).Namespace(ns).Get(ctx, string(u), metav1.GetOptions{})
		} else {
			obj, err = op.dyn.Resource(clusterReportGVR).Get(ctx, string(u), metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatalf("report of %s: %v", key, err)
		}
		results, _, _ := unstructured.NestedSlice(obj.Object, "results")
		m := map[string]auditResult{}
		for _, r := range results {
			r := r.(map[string]any)
			s := func(k string) string { v, _ := r[k].(string); return v }
			ts, _ := r["timestamp"].(map[string]any)
			sec, _ := ts["seconds"].(int64)
			m[s("policy")] = auditResult{Policy: s("policy"), Result: s("result"), Message: s("message"), Severity: s("severity"), Category: s("category"), Seconds: sec}
		}
		out[key] = m
	}
	return out
}

// countResults counts a policy's results in every Report and ClusterReport, by result.
func countResults(t *testing.T, ctx context.Context, op *operator, policy string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, gvr := range []schema.GroupVersionResource{reportGVR, clusterReportGVR} {
		l, err := op.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s: %v", gvr.Resource, err)
		}
		for _, rep := range l.Items {
			results, _, _ := unstructured.NestedSlice(rep.Object, "results")
			for _, r := range results {
				if r, _ := r.(map[string]any); r["policy"] == policy {
					res, _ := r["result"].(string)
					out[res]++
				}
			}
		}
	}
	return out
}

func checkResults(t *testing.T, got map[string]map[string]auditResult, want map[string]map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := map[string]string{}
		for p, r := range got[k] {
			g[p] = r.Result
		}
		if fmt.Sprint(g) != fmt.Sprint(want[k]) {
			t.Errorf("%s: results %v, want %v; reports: %+v", k, g, want[k], got[k])
		}
	}
}
