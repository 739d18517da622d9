package helmchart

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// wantAuditRules are the audit ClusterRole's rules, exactly (reads through `view` besides).
var wantAuditRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"policies.tollgate.dev"}, Resources: []string{"clusteradmissionpolicies", "admissionpolicies", "clusteradmissionpolicygroups", "admissionpolicygroups"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"policies.tollgate.dev"}, Resources: []string{"clusteradmissionpolicies/status", "admissionpolicies/status", "clusteradmissionpolicygroups/status", "admissionpolicygroups/status"}, Verbs: []string{"patch"}},
	{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{"openreports.io"}, Resources: []string{"reports", "clusterreports"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
	{APIGroups: []string{"wgpolicyk8s.io"}, Resources: []string{"policyreports", "clusterpolicyreports"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
}

// TestAuditCronJob: the audit's CronJob, ServiceAccount, RBAC and report CRDs as the defaults and
// the all-values file render them, and audit.enabled=false renders none of it.
func TestAuditCronJob(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		fullname   string
		schedule   string
		wantArgs   []string
		extraRules int
		crds       bool
		memLimit   string
	}{
		{"defaults", nil, "tollgate", "*/60 * * * *", []string{"audit", "--tollgate-namespace=$(POD_NAMESPACE)", "--report-kind=openreports",
			"--page-size=100", "--parallel-namespaces=1", "--parallel-resources=100", "--parallel-policies=5", "--log-fmt=json"}, 0, true, "256Mi"},
		{"all values", []string{"--values", allValues}, "tg", "17 */2 * * *", []string{"audit", "--tollgate-namespace=$(POD_NAMESPACE)", "--report-kind=policyreport",
			"--page-size=250", "--parallel-namespaces=2", "--parallel-resources=50", "--parallel-policies=3", "--ignore-namespaces=scratch,sandbox",
			"--log-fmt=json", "--service-ip", "--request-timeout=5s"}, 1, false, "128Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			m := byKey(t, decode(t, out))
			name := tc.fullname + "-audit"
			var cj batchv1.CronJob
			get(t, m, "CronJob/"+name, &cj)
			pod := cj.Spec.JobTemplate.Spec.Template.Spec
			if cj.Namespace != namespace || cj.Spec.Schedule != tc.schedule || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
				pod.ServiceAccountName != name || pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
				t.Fatalf("CronJob %s", m["CronJob/"+name].json)
			}
			c := pod.Containers[0]
			if !slices.Equal(c.Args, tc.wantArgs) {
				t.Errorf("args\n%q\nwant\n%q", c.Args, tc.wantArgs)
			}
			if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
				t.Errorf("env %+v", c.Env)
			}
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
				c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem ||
				c.Resources.Limits.Memory().Cmp(resource.MustParse(tc.memLimit)) != 0 {
				t.Errorf("security context or resources: pod %+v container %+v %+v", pod.SecurityContext, c.SecurityContext, c.Resources)
			}
			var sa corev1.ServiceAccount
			get(t, m, "ServiceAccount/"+name, &sa)
			var cr rbacv1.ClusterRole
			get(t, m, "ClusterRole/"+name, &cr)
			if !reflect.DeepEqual(cr.Rules[:len(wantAuditRules)], wantAuditRules) || len(cr.Rules) != len(wantAuditRules)+tc.extraRules {
				t.Errorf("audit ClusterRole rules\n%+v\nwant\n%+v (+%d extra)", cr.Rules, wantAuditRules, tc.extraRules)
			}
			for _, r := range cr.Rules {
				for _, s := range slices.Concat(r.Verbs, r.Resources, r.APIGroups) {
					if strings.Contains(s, "*") || s == "secrets" {
						t.Errorf("audit ClusterRole rule %+v: no wildcard, no secrets", r)
					}
				}
			}
			for binding, role := range map[string]string{name: name, name + "-view": "view"} {
				var b rbacv1.ClusterRoleBinding
				get(t, m, "ClusterRoleBinding/"+binding, &b)
				if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role || len(b.Subjects) != 1 ||
					b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != name || b.Subjects[0].Namespace != namespace {
					t.Errorf("ClusterRoleBinding %s: %+v", binding, b)
				}
			}
			for _, crd := range []string{"reports.openreports.io", "clusterreports.openreports.io"} {
				if _, ok := m["CustomResourceDefinition/"+crd]; ok != tc.crds {
					t.Errorf("CRD %s rendered %v, want %v", crd, ok, tc.crds)
				}
			}
		})
	}
	out, err := render(t, "--set", "audit.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	for k := range byKey(t, decode(t, out)) {
		if strings.Contains(k, "audit") || strings.Contains(k, "openreports") {
			t.Errorf("audit.enabled=false renders %s", k)
		}
	}
}

// TestAuditFlagsExist: every flag the CronJob passes is one `tollgate audit` defines.
func TestAuditFlagsExist(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "cmd", "tollgate", "audit.go"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.\w+Var[P]?\(&[^,]+, "([a-z0-9-]+)"`).FindAllStringSubmatch(string(src), -1) {
		defined[m[1]] = true
	}
	if len(defined) < 10 {
		t.Fatalf("found only %v in cmd/tollgate/audit.go: has the way flags are defined changed?", defined)
	}
	out, err := render(t, "--values", allValues)
	if err != nil {
		t.Fatal(err)
	}
	var cj batchv1.CronJob
	get(t, byKey(t, decode(t, out)), "CronJob/tg-audit", &cj)
	for _, a := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !defined[name] {
			t.Errorf("the chart passes %s, which tollgate audit does not define", a)
		}
	}
}

// TestReportCRDs: the chart carries the OpenReports v1alpha1 CRDs (reports-api v0.2.1).
func TestReportCRDs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "files", "report-crds", "*.yaml"))
	if err != nil || len(files) != 2 {
		t.Fatalf("report CRDs %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "group: openreports.io") || !strings.Contains(string(b), "name: v1alpha1") {
			t.Errorf("%s is not an openreports.io v1alpha1 CRD", f)
		}
	}
}

// TestAuditWatchMode: audit.mode=watch renders `tollgate audit --watch` as a Deployment of one
// replica (Recreate: two auditors never write reports at once) with its metrics port, Service and,
// on request, ServiceMonitor, and no CronJob; the pod is the CronJob's otherwise.
func TestAuditWatchMode(t *testing.T) {
	out, err := render(t, "--values", allValues, "--set", "audit.mode=watch", "--set", "audit.metricsPort=9191",
		"--set", "metrics.serviceMonitor.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	m := byKey(t, decode(t, out))
	if _, ok := m["CronJob/tg-audit"]; ok {
		t.Error("audit.mode=watch still renders the CronJob")
	}
	var d appsv1.Deployment
	get(t, m, "Deployment/tg-audit", &d)
	if d.Namespace != namespace || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment: replicas %v, strategy %q, namespace %q; want 1, Recreate, %s", d.Spec.Replicas, d.Spec.Strategy.Type, d.Namespace, namespace)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "tg-audit" || pod.RestartPolicy != "" || len(pod.Containers) != 1 {
		t.Fatalf("pod spec %s", m["Deployment/tg-audit"].json)
	}
	c := pod.Containers[0]
	want := []string{"audit", "--tollgate-namespace=$(POD_NAMESPACE)", "--report-kind=policyreport",
		"--page-size=250", "--parallel-namespaces=2", "--parallel-resources=50", "--parallel-policies=3", "--ignore-namespaces=scratch,sandbox",
		"--watch", "--metrics-addr=:9191", "--log-fmt=json", "--service-ip", "--request-timeout=5s"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("args\n%q\nwant\n%q", c.Args, want)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9191 {
		t.Errorf("ports %+v", c.Ports)
	}
	if sel := d.Spec.Selector.MatchLabels; sel["app.kubernetes.io/component"] != "audit" || !reflect.DeepEqual(sel, d.Spec.Template.Labels) {
		t.Errorf("selector %v, pod labels %v", sel, d.Spec.Template.Labels)
	}
	var svc corev1.Service
	get(t, m, "Service/tg-audit-metrics", &svc)
	if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || len(svc.Spec.Ports) != 1 ||
		svc.Spec.Ports[0].Port != 9191 || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("Service %s", m["Service/tg-audit-metrics"].json)
	}
	sm, ok := m["ServiceMonitor/tg-audit"]
	if !ok || !strings.Contains(string(sm.json), `"app.kubernetes.io/component":"audit"`) || !strings.Contains(string(sm.json), `"port":"metrics"`) {
		t.Errorf("ServiceMonitor/tg-audit: %v %s", ok, sm.json)
	}
	// the controller's ServiceMonitor must not select the audit's Service, nor the other way round
	if ctl := m["ServiceMonitor/tg-controller"]; !strings.Contains(string(ctl.json), `"app.kubernetes.io/component":"controller"`) {
		t.Errorf("controller ServiceMonitor %s", ctl.json)
	}

	if _, err := render(t, "--set", "audit.mode=hourly"); err == nil || !strings.Contains(err.Error(), "audit/mode") {
		t.Errorf("audit.mode=hourly: %v, want a schema error naming audit/mode", err)
	}
}
