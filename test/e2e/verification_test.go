package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// TestSignedPolicies: a PolicyServer with spec.verificationConfig (a ConfigMap naming a cosign
// key) on the real node: the policy whose module in the cluster's registry is signed with that
// key becomes active and denies; the unsigned one stays pending with the verification failure as
// its reason, while the signed one serves. Changing the ConfigMap to another key makes the signed
// policy fail too, without a rollout (the server pod stays the same).
func TestSignedPolicies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	op := startOperator(t, ctx)
	const server, cm = "signed", "verification"
	t.Cleanup(func() {
		op.deleteAll(t, []string{"ClusterAdmissionPolicy/signed-labels", "ClusterAdmissionPolicy/unsigned-caps", "PolicyServer/" + server})
		_ = env.cluster.Client.CoreV1().ConfigMaps(controllerNS).Delete(context.Background(), cm, metav1.DeleteOptions{})
	})
	push := func(example, repo string) (uri, digest string) {
		t.Helper()
		sources := filepath.Join(t.TempDir(), "sources.yml")
		if err := os.WriteFile(sources, []byte("insecure_sources: [\""+cluster.RegistryHost+"\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(env.bin, "push", "--force", "--sources-path", sources, filepath.Join(env.root, "examples", example, "policy.wasm"),
			"registry://"+cluster.RegistryHost+repo+":v1").CombinedOutput()
		if err != nil {
			t.Fatalf("tollgate push: %v: %s", err, out)
		}
		return "registry://" + cluster.PodRegistryHost + repo + ":v1", strings.TrimSpace(string(out))
	}
	signed, signedDigest := push("required-labels", "/e2e/signed/required-labels")
	unsigned, _ := push("capabilities-drop", "/e2e/unsigned/capabilities-drop")
	key, other := verifytest.NewKey(t), verifytest.NewKey(t)
	key.SignKey(t, verifytest.Digest(t, cluster.RegistryHost, "e2e/signed/required-labels", signedDigest), nil)

	cs := env.cluster.Client
	config := func(k *verifytest.Key) map[string]string {
		pem := strings.ReplaceAll(strings.TrimSpace(string(k.PublicPEM)), "\n", "\n      ")
		return map[string]string{"verification-config": "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n      " + pem + "\n"}
	}
	if _, err := cs.CoreV1().ConfigMaps(controllerNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Namespace: controllerNS},
		Data: config(key)}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apply(t, ctx, policyServerYAML(server, 1, "  verificationConfig: "+cm+"\n"))
	policy := func(name, module, resources, settings string) string {
		return `apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: ` + name + `
spec:
  policyServer: ` + server + `
  module: ` + module + `
  mutating: false
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["` + resources + `"]
      operations: ["CREATE"]
  namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [signed-e2e]}
` + settings
	}
	if err := ensureNamespace(ctx, cs, "signed-e2e"); err != nil {
		t.Fatal(err)
	}
	apply(t, ctx, policy("signed-labels", signed, "configmaps", "  settings: {mandatory_labels: [owner]}\n"))
	apply(t, ctx, policy("unsigned-caps", unsigned, "pods", ""))
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "signed-labels", "active", 4*time.Minute)
	reason := func(name, want string) {
		t.Helper()
		eventually(t, 2*time.Minute, func() error {
			obj := op.get(t, ctx, "ClusterAdmissionPolicy", "", name)
			st, _, _ := unstructured.NestedString(obj.Object, "status", "policyStatus")
			if msgs := conditionMessages(obj); st == "active" || !strings.Contains(msgs, want) {
				return fmt.Errorf("%s: policyStatus %q, conditions %s; want not active with %q", name, st, msgs, want)
			}
			return nil
		})
	}
	reason("unsigned-caps", "module is not signed")
	if err := createConfigMap(ctx, cs, "signed-e2e", nil); !isDenial(err) || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("a ConfigMap without the owner label, with the signed policy active: %v", err)
	}
	pods, err := waitServerPods(ctx, cs, controllerNS, "policy-server-"+server, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	podName := pods[0].Name

	// Another key in the ConfigMap: the server verifies again and refuses the signed module,
	// with the same pod (no rollout).
	if _, err := cs.CoreV1().ConfigMaps(controllerNS).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Namespace: controllerNS},
		Data: config(other)}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reason("signed-labels", "not signed with this key")
	pods, err = waitServerPods(ctx, cs, controllerNS, "policy-server-"+server, 1, time.Minute)
	if err != nil || pods[0].Name != podName {
		t.Fatalf("server pods after the ConfigMap change: %v (%v), want %s", pods, err, podName)
	}
}
