package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubewardenManifests: Kubewarden v1 manifests from its documentation, with only the
// apiVersion changed, are accepted by the apiserver (server-side dry run against tollgate's
// CRDs); invalid ones are refused with a message naming the field, as Kubewarden's validating
// webhooks refuse them (here: CEL in the CRDs, see shared/OPERATOR.md §2).
func TestKubewardenManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	files, err := filepath.Glob(filepath.Join("testdata", "kubewarden", "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("testdata/kubewarden: %d manifests (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run("accepted/"+filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), "apiVersion: policies.tollgate.dev/v1\n") {
				t.Fatalf("%s: not a policies.tollgate.dev/v1 manifest", f)
			}
			out, err := kubectlApply(ctx, string(data), "--dry-run=server")
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !strings.Contains(out, "(server dry run)") {
				t.Fatalf("kubectl said %q", out)
			}
		})
	}

	cases := []struct {
		name string
		// before is created for real first (and deleted afterwards): the case is an update.
		before, manifest string
		// want are substrings of kubectl's error: the field and the rule's message.
		want []string
	}{
		{
			name:     "policyServer changed on update",
			before:   capManifest("immutable-ps", "policyServer: default"),
			manifest: capManifest("immutable-ps", "policyServer: other"),
			want:     []string{"spec.policyServer", "policyServer is immutable"},
		},
		{
			name:     "mode protect to monitor",
			before:   capManifest("mode-change", "mode: protect"),
			manifest: capManifest("mode-change", "mode: monitor"),
			want:     []string{"spec.mode", "mode may go from monitor to protect"},
		},
		{
			name: "minAvailable and maxUnavailable",
			manifest: `apiVersion: policies.tollgate.dev/v1
kind: PolicyServer
metadata:
  name: both-budgets
spec:
  image: ghcr.io/kubewarden/policy-server:v1.17.0
  replicas: 2
  minAvailable: 1
  maxUnavailable: 1
`,
			want: []string{"spec:", "minAvailable and maxUnavailable are mutually exclusive"},
		},
		{
			name:     "timeoutEvalSeconds above timeoutSeconds",
			manifest: capManifest("slow-eval", "timeoutEvalSeconds: 15"),
			want:     []string{"spec.timeoutEvalSeconds", "timeoutEvalSeconds must not exceed timeoutSeconds"},
		},
		{
			name: "AdmissionPolicy matching every resource of every group",
			manifest: `apiVersion: policies.tollgate.dev/v1
kind: AdmissionPolicy
metadata:
  name: everything
  namespace: default
spec:
  module: registry://ghcr.io/kubewarden/policies/safe-labels:v0.1.0
  mutating: false
  rules:
    - apiGroups: ["*"]
      apiVersions: ["*"]
      resources: ["*"]
      operations: ["CREATE"]
`,
			want: []string{"spec.rules", "an AdmissionPolicy may not match every resource of every group"},
		},
		{
			name:     "group member named if",
			manifest: capg("reserved-member", "if", "if()"),
			want:     []string{"spec.policies", "policy names must be identifiers"},
		},
		{
			name:     "expression calling an unknown member",
			manifest: capg("unknown-member", "reject_latest", "reject_latest() && signed()"),
			want:     []string{"spec.expression", "expression calls a policy that is not in policies"},
		},
		{
			name: "webhookPort equal to readinessProbePort",
			manifest: `apiVersion: policies.tollgate.dev/v1
kind: PolicyServer
metadata:
  name: same-ports
spec:
  image: ghcr.io/kubewarden/policy-server:v1.17.0
  replicas: 1
  webhookPort: 8081
`,
			want: []string{"spec.readinessProbePort", "webhookPort and readinessProbePort must differ"},
		},
	}
	for _, tc := range cases {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			if tc.before != "" {
				if out, err := kubectlApply(ctx, tc.before); err != nil {
					t.Fatalf("creating the object to update: %v: %s", err, out)
				}
				t.Cleanup(func() {
					_, _, _ = env.cluster.KubectlWithInput(context.Background(), strings.NewReader(tc.before), "delete", "--wait=false", "-f", "-")
				})
			}
			out, err := kubectlApply(ctx, tc.manifest, "--dry-run=server")
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			t.Logf("refused: %s", strings.TrimSpace(out))
		})
	}
}

// capManifest is a ClusterAdmissionPolicy with extra spec lines.
func capManifest(name string, extra ...string) string {
	m := `apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: ` + name + `
spec:
  module: registry://ghcr.io/kubewarden/policies/safe-labels:v0.1.0
  mutating: false
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
`
	for _, e := range extra {
		m += "  " + e + "\n"
	}
	return m
}

// capg is a ClusterAdmissionPolicyGroup with one member and an expression.
func capg(name, member, expression string) string {
	return `apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicyGroup
metadata:
  name: ` + name + `
spec:
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
  policies:
    ` + member + `:
      module: ghcr.io/kubewarden/policies/trusted-repos-policy:v0.2.0
  expression: "` + expression + `"
  message: "refused"
`
}
