package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chartNamespace and chartRelease are the test's own, so that the objects it applies for real
// cannot meet those of other tests on the shared cluster.
const (
	chartNamespace = "chart-e2e"
	chartRelease   = "chart-e2e"
)

// TestChart applies charts/tollgate to the shared kube-apiserver: its CRDs for real (the same
// files as crds/, which TestMain applied), then the rendered templates with
// `kubectl apply --server-side --dry-run=server`, with the default values and with a values file
// that sets everything (the PolicyServer passes the CRD's schema and CEL rules); then the
// rendering for real, checking the controller's ServiceAccount under RBAC for what it must and
// must not be allowed.
func TestChart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a cold helm build included
	defer cancel()
	helm := env.cluster.Binaries.Helm
	c := env.cluster
	chart := filepath.Join(env.root, "charts", "tollgate")
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		var (
			out, stderr string
			err         error
		)
		if stdin != "" {
			out, stderr, err = c.KubectlWithInput(ctx, strings.NewReader(stdin), args...)
		} else {
			out, stderr, err = c.Kubectl(ctx, args...)
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		return out
	}

	kubectl("", "apply", "--server-side", "-f", filepath.Join(chart, "crds"))
	kubectl("", "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, chartNamespace, metav1.GetOptions{}); err != nil {
		kubectl("", "create", "namespace", chartNamespace)
	}
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	render := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, helm, append([]string{"template", chartRelease, chart, "--namespace", chartNamespace,
			"--kube-version", strings.TrimPrefix(v.GitVersion, "v")}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}

	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"defaults", nil, 15}, // 8, and the audit's 7: CronJob, ServiceAccount, ClusterRole, 2 ClusterRoleBindings, 2 report CRDs
		// No ServiceAccount (serviceAccount.create=false); the ServiceMonitor's CRD is not installed
		// here; the audit's objects without the report CRDs (installReportCRDs=false).
		{"all values", []string{"--values", filepath.Join(env.root, "test", "helmchart", "testdata", "all-values.yaml"), "--set", "metrics.serviceMonitor.enabled=false"}, 12},
	} {
		t.Run("dry-run "+tc.name, func(t *testing.T) {
			// --force-conflicts: another test may own a real PolicyServer "default".
			out := kubectl(render(tc.args...), "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
			lines := strings.Count(strings.TrimSpace(out), "\n") + 1
			if lines != tc.want || strings.Count(out, "serverside-applied (server dry run)") != tc.want {
				t.Errorf("want %d objects applied in a server dry run, got:\n%s", tc.want, out)
			}
		})
	}

	t.Run("apply and RBAC", func(t *testing.T) {
		manifest := render("--set", "policyServer.name="+chartRelease)
		kubectl(manifest, "apply", "--server-side", "-f", "-")
		t.Cleanup(func() {
			// No controller adds finalizers here; the namespace stays (no namespace controller).
			if _, stderr, err := c.KubectlWithInput(context.Background(), strings.NewReader(manifest), "delete", "--ignore-not-found", "-f", "-"); err != nil {
				t.Errorf("delete the chart's objects: %v\n%s", err, stderr)
			}
		})
		var ps struct {
			Spec struct {
				Image                          string
				Replicas                       int
				NamespacedPoliciesCapabilities []string
			}
		}
		if err := json.Unmarshal([]byte(kubectl("", "get", "policyserver", chartRelease, "-o", "json")), &ps); err != nil {
			t.Fatal(err)
		}
		// Tenants' policies get no host capability by default: the chart renders an empty list.
		if !strings.HasPrefix(ps.Spec.Image, "ghcr.io/tollgate-dev/tollgate:") || ps.Spec.Replicas != 1 || ps.Spec.NamespacedPoliciesCapabilities == nil ||
			len(ps.Spec.NamespacedPoliciesCapabilities) != 0 {
			t.Errorf("PolicyServer %s: %+v", chartRelease, ps.Spec)
		}
		if _, err := c.Client.AppsV1().Deployments(chartNamespace).Get(ctx, chartRelease+"-tollgate-controller", metav1.GetOptions{}); err != nil {
			t.Errorf("controller Deployment: %v", err)
		}
		sa := "system:serviceaccount:" + chartNamespace + ":" + chartRelease + "-tollgate-controller"
		for _, tc := range []struct {
			args []string
			want bool
		}{
			{[]string{"watch", "policyservers.policies.tollgate.dev"}, true},
			{[]string{"patch", "clusteradmissionpolicies.policies.tollgate.dev", "--subresource=status"}, true},
			{[]string{"update", "admissionpolicygroups.policies.tollgate.dev", "--subresource=finalizers", "-n", "shop"}, true},
			{[]string{"create", "validatingwebhookconfigurations.admissionregistration.k8s.io"}, true},
			{[]string{"delete", "mutatingwebhookconfigurations.admissionregistration.k8s.io"}, true},
			{[]string{"create", "events", "-n", "default"}, true},
			{[]string{"patch", "events.events.k8s.io", "-n", "shop"}, true},
			{[]string{"create", "secrets", "-n", chartNamespace}, true},
			{[]string{"update", "deployments.apps", "-n", chartNamespace}, true},
			{[]string{"create", "poddisruptionbudgets.policy", "-n", chartNamespace}, true},
			{[]string{"list", "endpointslices.discovery.k8s.io", "-n", chartNamespace}, true},
			{[]string{"update", "leases.coordination.k8s.io", "-n", chartNamespace}, true},
			// Not allowed: anything outside its namespace, deleting or creating policies, other kinds.
			{[]string{"get", "secrets", "-n", "default"}, false},
			{[]string{"list", "secrets", "--all-namespaces"}, false},
			{[]string{"create", "deployments.apps", "-n", "default"}, false},
			{[]string{"create", "endpointslices.discovery.k8s.io", "-n", chartNamespace}, false},
			{[]string{"delete", "policyservers.policies.tollgate.dev"}, false},
			{[]string{"create", "clusteradmissionpolicies.policies.tollgate.dev"}, false},
			{[]string{"list", "pods", "-n", chartNamespace}, false},
			{[]string{"create", "clusterrolebindings.rbac.authorization.k8s.io"}, false},
			{[]string{"get", "events", "-n", "default"}, false},
		} {
			args := append([]string{"auth", "can-i", "--as=" + sa}, tc.args...)
			out, _, _ := c.Kubectl(ctx, args...) // exit status 1 means "no"
			if got := strings.TrimSpace(out) == "yes"; got != tc.want {
				t.Errorf("kubectl auth can-i %s: %q, want allowed=%v", strings.Join(tc.args, " "), strings.TrimSpace(out), tc.want)
			}
		}
		// the audit's ServiceAccount: reads what it audits (view), the policies and their webhooks,
		// writes reports; no Secrets, no other writes
		auditSA := "system:serviceaccount:" + chartNamespace + ":" + chartRelease + "-tollgate-audit"
		for _, tc := range []struct {
			args []string
			want bool
		}{
			{[]string{"list", "pods", "--all-namespaces"}, true},
			{[]string{"list", "configmaps", "-n", "default"}, true},
			{[]string{"list", "namespaces"}, true},
			{[]string{"watch", "clusteradmissionpolicies.policies.tollgate.dev"}, true},
			{[]string{"get", "validatingwebhookconfigurations.admissionregistration.k8s.io"}, true},
			{[]string{"create", "reports.openreports.io", "-n", "default"}, true},
			{[]string{"delete", "clusterreports.openreports.io"}, true},
			{[]string{"update", "reports.openreports.io", "-n", "kube-system"}, true},
			{[]string{"get", "secrets", "-n", chartNamespace}, false},
			{[]string{"list", "secrets", "--all-namespaces"}, false},
			{[]string{"create", "pods", "-n", "default"}, false},
			{[]string{"update", "clusteradmissionpolicies.policies.tollgate.dev"}, false},
			{[]string{"create", "validatingwebhookconfigurations.admissionregistration.k8s.io"}, false},
		} {
			args := append([]string{"auth", "can-i", "--as=" + auditSA}, tc.args...)
			// `view` is an aggregated role: kube-controller-manager fills it in shortly after the
			// cluster starts, so an allowed verb may take a moment to be
			eventually(t, 30*time.Second, func() error {
				out, _, _ := c.Kubectl(ctx, args...)
				if got := strings.TrimSpace(out) == "yes"; got != tc.want {
					return fmt.Errorf("audit: kubectl auth can-i %s: %q, want allowed=%v", strings.Join(tc.args, " "), strings.TrimSpace(out), tc.want)
				}
				return nil
			})
		}
	})
}
