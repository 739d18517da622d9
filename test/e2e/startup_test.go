package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestColdStartOnRealNode: a PolicyServer serving the MutatingAdmissionPolicy built-in (about 2
// CPU-s to compile the TinyGo module on a cold cache; 20-30 s for the standard-Go one), the
// Gatekeeper mutation built-in and a context-aware policy, in a new pod whose compilation cache
// (an emptyDir) is empty, with `limits.cpu: 500m`, becomes Ready within coldStartCeiling with
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
	apply(t, ctx, policyServerYAML(server, 1, "  limits:\n    cpu: 500m\n"))
	podReady, err := waitPodReady(ctx, op.cs, controllerNS, serverObject, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ready := podReady.Sub(begin)
	pods, err := waitServerPods(ctx, op.cs, controllerNS, serverObject, 1, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rolledOut := time.Since(begin)
	restarts := int32(0)
	for _, s := range pods[0].Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	line := fmt.Sprintf("e2e: cold start of MAP + Gatekeeper + context-aware policies under limits.cpu 500m: pod Ready after %v (Deployment rolled out after %v), restarts %d; load average %s",
		ready.Round(100*time.Millisecond), rolledOut.Round(100*time.Millisecond), restarts, loadAverage())
	t.Log(line)
	fmt.Println(line)
	phases := "e2e: cold start phases: " + startupPhases(ctx, op.cs, &pods[0], begin)
	t.Log(phases)
	fmt.Println(phases)
	if restarts != 0 {
		t.Errorf("the policy server restarted %d times during its cold start%s", restarts, podsState(ctx, op.cs, controllerNS, &metav1.LabelSelector{MatchLabels: pods[0].Labels}))
	}
	if ready > coldStartCeiling {
		t.Errorf("the pod was Ready %v after the PolicyServer's apply, ceiling %v (%s)", ready.Round(100*time.Millisecond), coldStartCeiling, phases)
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

// coldStartCeiling bounds TestColdStartOnRealNode's time to Ready. Issue 31's target is 10 s;
// measured with the TinyGo built-in and the readiness probe every second: 6.0-10.7 s in 7 runs at
// load 3-9.6 on the 2-core machine, the pod getting less than its 500m when the machine is loaded
// (docs/benchmarks/real-node.md); the standard-Go built-in took 53-60 s. The ceiling leaves room
// for a loaded machine.
const coldStartCeiling = 30 * time.Second

// TestScaleMixOnRealNode: a PolicyServer with the default resources (the PolicyServer's own
// defaults: no requests or limits unless the operator sets them) serving loadgen scale's 50-policy
// mix (12 required-labels, 12 capabilities-drop, 12 go-image-registries, 8 MutatingAdmissionPolicy
// built-in, 6 Gatekeeper built-in, each with settings of its own) starts on a cold cache and stays
// up: every policy active, no restart, no OOM kill. It prints the pod's peak memory (its memory
// cgroup's max_usage_in_bytes, page cache included).
func TestScaleMixOnRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	op := startOperator(t, ctx)
	const server, ns, label = "mix", "scale-mix", "e2e.tollgate.dev/mix"
	serverObject := "policy-server-" + server
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		if err := op.dyn.Resource(policyGVR["ClusterAdmissionPolicy"]).DeleteCollection(cctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label}); err != nil {
			t.Errorf("delete the mix: %v", err)
		}
		_ = poll(cctx, time.Minute, 500*time.Millisecond, func() error {
			l, err := op.dyn.Resource(policyGVR["ClusterAdmissionPolicy"]).List(cctx, metav1.ListOptions{LabelSelector: label})
			if err == nil && len(l.Items) > 0 {
				err = fmt.Errorf("%d left", len(l.Items))
			}
			return err
		})
		op.deleteAll(t, []string{"PolicyServer/" + server})
	})
	yamlFile := func(rel string) any {
		b, err := os.ReadFile(filepath.Join(env.root, rel))
		if err != nil {
			t.Fatal(err)
		}
		j, err := sigsyaml.YAMLToJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(j, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	sidecar := yamlFile("policies/mutating-admission-policy/testdata/sidecar-settings.yml")
	authz := yamlFile("policies/mutating-admission-policy/testdata/authz-settings.yml")
	gk := yamlFile("policies/gatekeeper-mutation/testdata/settings-bench.yaml")
	// Settings of their own: the JSON of a settings document with one string replaced.
	vary := func(v any, from, to string) any {
		b, _ := json.Marshal(v)
		var out any
		_ = json.Unmarshal([]byte(strings.ReplaceAll(string(b), from, to)), &out)
		return out
	}
	type mixPolicy struct {
		name, module string
		settings     any
		mutating     bool
	}
	var mix []mixPolicy
	for i := range 12 {
		mix = append(mix, mixPolicy{fmt.Sprintf("mix-labels-%d", i), policyRef(t, "required-labels"),
			map[string]any{"mandatory_labels": []any{"owner", "app.kubernetes.io/name"}, "denied_labels": []any{fmt.Sprintf("debug-%d", i)}}, false})
		mix = append(mix, mixPolicy{fmt.Sprintf("mix-caps-%d", i), policyRef(t, "capabilities-drop"), map[string]any{}, true})
		mix = append(mix, mixPolicy{fmt.Sprintf("mix-registries-%d", i), policyRef(t, "go-image-registries"),
			map[string]any{"allowedRegistries": []any{"docker.io", "ghcr.io/acme", "registry.k8s.io", fmt.Sprintf("quay.io/team-%d", i)}}, false})
	}
	for i := range 8 {
		s := sidecar
		if i%2 == 1 {
			s = authz
		}
		mix = append(mix, mixPolicy{fmt.Sprintf("mix-map-%d", i), "builtin://mutating-admission-policy",
			vary(s, "mesh/proxy:v1.0.0", fmt.Sprintf("mesh/proxy:v1.0.%d", i%4)), true})
	}
	for i := range 6 {
		mix = append(mix, mixPolicy{fmt.Sprintf("mix-gk-%d", i), "builtin://gatekeeper-mutation", vary(gk, "tollgate", fmt.Sprintf("tollgate-%d", i%3)), true})
	}
	if len(mix) != 50 {
		t.Fatalf("the mix has %d policies", len(mix))
	}
	for _, p := range mix {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policies.tollgate.dev/v1", "kind": "ClusterAdmissionPolicy",
			"metadata": map[string]any{"name": p.name, "labels": map[string]any{label: "true"}},
			"spec": map[string]any{
				"policyServer": server, "module": p.module, "settings": p.settings, "mutating": p.mutating,
				"rules": []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"}}},
				"namespaceSelector": map[string]any{"matchExpressions": []any{map[string]any{
					"key": "kubernetes.io/metadata.name", "operator": "In", "values": []any{ns}}}},
			},
		}}
		if _, err := op.dyn.Resource(policyGVR["ClusterAdmissionPolicy"]).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.name, err)
		}
	}
	begin := time.Now()
	apply(t, ctx, policyServerYAML(server, 1, ""))
	pods, err := waitServerPods(ctx, op.cs, controllerNS, serverObject, 1, 6*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Since(begin)
	err = poll(ctx, 2*time.Minute, time.Second, func() error {
		l, err := op.dyn.Resource(policyGVR["ClusterAdmissionPolicy"]).List(ctx, metav1.ListOptions{LabelSelector: label})
		if err != nil {
			return err
		}
		var notActive []string
		for _, o := range l.Items {
			if st, _, _ := unstructured.NestedString(o.Object, "status", "policyStatus"); st != "active" {
				notActive = append(notActive, o.GetName()+"="+st)
			}
		}
		if len(notActive) > 0 {
			return fmt.Errorf("%d policies not active: %v", len(notActive), notActive)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := op.cs.CoreV1().Pods(controllerNS).Get(ctx, pods[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var restarts int32
	for _, s := range p.Status.ContainerStatuses {
		restarts += s.RestartCount
		if s.LastTerminationState.Terminated != nil {
			t.Errorf("container %s was terminated: %s (exit %d)", s.Name, s.LastTerminationState.Terminated.Reason, s.LastTerminationState.Terminated.ExitCode)
		}
	}
	peak := podPeakMemory(string(p.UID))
	line := fmt.Sprintf("e2e: 50-policy mix on default resources: Ready after %v, 50 active after %v, restarts %d, pod peak memory %d MB; load average %s",
		ready.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond), restarts, peak>>20, loadAverage())
	t.Log(line)
	fmt.Println(line)
	phases := "e2e: 50-policy mix start phases: " + startupPhases(ctx, op.cs, &pods[0], begin)
	t.Log(phases)
	fmt.Println(phases)
	if restarts != 0 {
		t.Errorf("the policy server restarted %d times", restarts)
	}
}

// podPeakMemory is the pod's memory cgroup's peak usage in bytes (cgroup v1, the cgroupfs
// driver's kubepods[/<qos>]/pod<UID>), 0 if it cannot be read.
func podPeakMemory(uid string) int64 {
	var peak int64
	_ = filepath.WalkDir("/sys/fs/cgroup/memory/kubepods", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || filepath.Base(p) != "pod"+uid {
			return nil
		}
		if b, err := os.ReadFile(filepath.Join(p, "memory.max_usage_in_bytes")); err == nil {
			fmt.Sscan(strings.TrimSpace(string(b)), &peak)
		}
		return filepath.SkipAll
	})
	return peak
}

// startupPhases says when, after begin (the PolicyServer's apply), the pod was created, scheduled
// and its container started (the apiserver's timestamps, whole seconds), when the server wrote its
// first log line and "policies loaded" (the container log's timestamps) and when the pod became
// Ready (whole seconds): where a start-up's time goes.
func startupPhases(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, begin time.Time) string {
	p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "?"
		}
		return t.Sub(begin).Round(100 * time.Millisecond).String()
	}
	var scheduled, ready, started time.Time
	for _, c := range p.Status.Conditions {
		switch c.Type {
		case corev1.PodScheduled:
			scheduled = c.LastTransitionTime.Time
		case corev1.PodReady:
			ready = c.LastTransitionTime.Time
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil {
			started = c.State.Running.StartedAt.Time
		}
	}
	var first, loaded time.Time
	var loadedMsg string
	raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Timestamps: true}).DoRaw(ctx)
	for _, l := range strings.Split(string(raw), "\n") {
		ts, rest, ok := strings.Cut(l, " ")
		t, perr := time.Parse(time.RFC3339Nano, ts)
		if !ok || perr != nil {
			continue
		}
		if first.IsZero() {
			first = t
		}
		var entry struct {
			Msg      string `json:"msg"`
			Duration int64  `json:"duration"`
			Failed   int    `json:"failed"`
		}
		if json.Unmarshal([]byte(rest), &entry) == nil && entry.Msg == "policies loaded" && loaded.IsZero() {
			loaded = t
			loadedMsg = fmt.Sprintf(" (load %v, %d failed)", time.Duration(entry.Duration).Round(10*time.Millisecond), entry.Failed)
		}
	}
	if err != nil {
		loadedMsg += " (log: " + err.Error() + ")"
	}
	return fmt.Sprintf("pod created %s, scheduled %s, container started %s, first log line %s, policies loaded %s%s, Ready %s (apiserver times in whole seconds)",
		at(p.CreationTimestamp.Time), at(scheduled), at(started), at(first), at(loaded), loadedMsg, at(ready))
}

// waitPodReady polls (every 100 ms) the pods of Deployment ns/name until one is Ready, and returns
// when it saw that: the pod's own Ready, which the Deployment's status reports a second or so later
// (kube-controller-manager's round trip); its condition's time has whole seconds only.
func waitPodReady(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := poll(ctx, timeout, 100*time.Millisecond, func() error {
		pods, err := serverPods(ctx, cs, ns, name)
		if err != nil {
			return err
		}
		for i := range pods {
			if podReady(&pods[i]) {
				at = time.Now()
				return nil
			}
		}
		return fmt.Errorf("deployment %s/%s: %d pods, none Ready", ns, name, len(pods))
	})
	return at, err
}

// loadAverage is the machine's /proc/loadavg (1, 5 and 15 minutes), or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
