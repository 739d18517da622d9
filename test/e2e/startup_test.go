package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// TestColdStartOnRealNode: a PolicyServer serving the MutatingAdmissionPolicy built-in (a 20-30 s
// compile on a cold cache), the Gatekeeper mutation built-in and a context-aware policy, in a new
// pod whose compilation cache (an emptyDir) is empty, with `limits.cpu: 500m`, becomes Ready with
// no container restart. Before the probes answered during the load, the kubelet's liveness probe
// killed this pod mid-compile on every start and it never became Ready (docs/e2e.md,
// RATIONALE.md "Why do the probes answer before policies load?").
func TestColdStartOnRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	op := startOperator(t, ctx, "--set", "contextAwarePolicies=true") // the chart's opt-in: the controller writes ClusterRoles
	const server, ns = "cold", "cold-start"
	serverObject := "policy-server-" + server
	policies := []string{"ClusterAdmissionPolicy/cold-map", "ClusterAdmissionPolicy/cold-gatekeeper", "ClusterAdmissionPolicy/cold-unique-ingress"}
	t.Cleanup(func() { op.deleteAll(t, append(policies, "PolicyServer/"+server)) })
	if err := ensureNamespace(ctx, op.cs, ns); err != nil {
		t.Fatal(err)
	}
	settings := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(env.root, rel))
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			lines = append(lines, "    "+l)
		}
		return "  settings:\n" + strings.Join(lines, "\n") + "\n"
	}
	policy := func(name, module string, mutating bool, resources, extra string) string {
		return fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: %s
spec:
  policyServer: %s
  module: %s
  mutating: %t
  rules:
    - apiGroups: ["*"]
      apiVersions: ["v1"]
      resources: [%s]
      operations: ["CREATE"]
  namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [%s]}
%s`, name, server, module, mutating, resources, ns, extra)
	}
	// The policies first: the pod's first load is the cold one being measured.
	apply(t, ctx, policy("cold-map", "builtin://mutating-admission-policy", true, "pods",
		settings("policies/mutating-admission-policy/testdata/sidecar-settings.yml")))
	apply(t, ctx, policy("cold-gatekeeper", "builtin://gatekeeper-mutation", true, "pods",
		settings("policies/gatekeeper-mutation/testdata/settings-bench.yaml")))
	apply(t, ctx, policy("cold-unique-ingress", policyRef(t, "unique-ingress-host"), false, "ingresses",
		"  contextAwareResources:\n    - {apiVersion: networking.k8s.io/v1, kind: Ingress}\n"))
	begin := time.Now()
	apply(t, ctx, `apiVersion: policies.tollgate.dev/v1
kind: PolicyServer
metadata:
  name: `+server+`
spec:
  image: `+env.image+`
  replicas: 1
  insecureSources: ["`+cluster.PodRegistryHost+`"]
  limits:
    cpu: 500m
`)
	pods, err := waitServerPods(ctx, op.cs, controllerNS, serverObject, 1, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Since(begin)
	restarts := int32(0)
	for _, s := range pods[0].Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	line := fmt.Sprintf("e2e: cold start of MAP + Gatekeeper + context-aware policies under limits.cpu 500m: Ready after %v, restarts %d",
		ready.Round(100*time.Millisecond), restarts)
	t.Log(line)
	fmt.Println(line)
	if restarts != 0 {
		t.Errorf("the policy server restarted %d times during its cold start%s", restarts, podsState(ctx, op.cs, controllerNS, &metav1.LabelSelector{MatchLabels: pods[0].Labels}))
	}
	for _, p := range policies {
		kind, name, _ := strings.Cut(p, "/")
		op.waitStatus(t, ctx, kind, "", name, "active", 2*time.Minute)
	}
	// It serves: the MAP built-in injects its sidecar, Gatekeeper's Assign sets the pull policy.
	// (The sidecar policy's matchCondition reads spec.initContainers, which must exist.)
	eventually(t, 30*time.Second, func() error {
		p, err := op.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "app-"},
			Spec: corev1.PodSpec{
				InitContainers:  []corev1.Container{{Name: "init", Image: "registry.example/init:1"}},
				Containers:      []corev1.Container{{Name: "checkout", Image: "registry.example/app:1"}},
				SchedulingGates: []corev1.PodSchedulingGate{{Name: "e2e.tollgate.dev/never"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		name := p.Name
		if !slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "mesh-proxy" }) ||
			p.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways {
			return fmt.Errorf("pod %s not mutated by both built-ins: init containers %v, pull policy %s", name, p.Spec.InitContainers, p.Spec.Containers[0].ImagePullPolicy)
		}
		return nil
	})
}
