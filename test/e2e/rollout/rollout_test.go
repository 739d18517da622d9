// Package rollout_test runs a policy's revisions end to end on a real etcd and kube-apiserver
// (no node): tollgate's CRDs, `tollgate controller` as a process, `tollgate serve` as the policy
// server's one replica (the harness plays the kubelet: it writes the ConfigMap's files, starts
// serve watching that ConfigMap, and publishes it in an EndpointSlice, docs/operator.md), a
// real registry, and the real `tollgate rollout` commands.
package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

const ns = "tollgate"

// harness is the running control plane, controller and policy server.
type harness struct {
	t       *testing.T
	ctx     context.Context
	c       *cluster.Cluster
	bin     string // tollgate
	dir     string
	probes  string // serve's probe port URL
	serveMu sync.Mutex
	serveLg bytes.Buffer
}

func (h *harness) tollgate(args ...string) (string, error) {
	cmd := exec.CommandContext(h.ctx, h.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("tollgate %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// waitFor polls f every 20 ms until it returns nil, failing after ceiling (a hang, not a slow
// machine).
func (h *harness) waitFor(what string, ceiling time.Duration, f func() error) time.Duration {
	h.t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < ceiling {
		if err = f(); err == nil {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.serveMu.Lock()
	defer h.serveMu.Unlock()
	h.t.Fatalf("%s: not after %v: %v\nserve's log:\n%s", what, ceiling, err, tail(h.serveLg.String(), 30))
	return 0
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// servedDigest is the module digest serve's replica loaded for the policy id ("" if none).
func (h *harness) servedDigest(id string) (status.Policy, error) {
	resp, err := http.Get(h.probes + "/policies")
	if err != nil {
		return status.Policy{}, err
	}
	defer resp.Body.Close()
	var ps status.Policies
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		return status.Policy{}, err
	}
	for _, p := range ps.Policies {
		if p.ID == id && p.Current() {
			return p, nil
		}
	}
	return status.Policy{}, fmt.Errorf("%s not served: %+v", id, ps.Policies)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRollout: a ClusterAdmissionPolicy changed twice has two ControllerRevisions that `tollgate
// rollout history` lists with their change causes; with the registry stopped, `tollgate rollout
// undo` pins the first module to its manifest digest, the policy server serves it again (the
// time it took is logged) and the first revision becomes revision 3. The CRDs default
// spec.revisionHistoryLimit to 10 and refuse an empty shadow; a shadow is written into the
// server's policies.yml entry. A group's expression edit is a revision, and its undo restores
// the expression.
func TestRollout(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, dir: t.TempDir()}
	h.bin = filepath.Join(h.dir, "tollgate")
	build := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/tollgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	testfixture.File(t, "examples/required-labels/policy.wasm")
	testfixture.File(t, "examples/capabilities-drop/policy.wasm")

	h.c, err = cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", h.c.LogTail(30))
		}
		_ = h.c.Stop()
	})
	args := []string{"apply", "--server-side"}
	crds, _ := filepath.Glob(filepath.Join(root, "crds", "*.yaml"))
	for _, f := range crds {
		args = append(args, "-f", f)
	}
	if _, stderr, err := h.c.Kubectl(ctx, args...); err != nil {
		t.Fatalf("kubectl apply CRDs: %v\n%s", err, stderr)
	}
	if _, stderr, err := h.c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		t.Fatalf("CRDs not established: %v\n%s", err, stderr)
	}
	if _, err := h.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	reg := ocitest.Start(t, ocitest.Options{})
	push := func(example, tag string) string {
		out, err := h.tollgate("push", testfixture.Path("examples/"+example+"/policy.wasm"), reg.URI("labels:"+tag),
			"--store-path", filepath.Join(h.dir, "push-store"), "--sources-path", reg.SourcesPath)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	m1, m2 := push("required-labels", "v1"), push("capabilities-drop", "v2")

	ctrl := exec.CommandContext(ctx, h.bin, "controller", "--namespace="+ns, "--kubeconfig="+h.c.Kubeconfig, "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--status-poll-interval=100ms", "--log-level=warn")
	ctrlLog := &lockedWriter{mu: &h.serveMu, b: &bytes.Buffer{}}
	ctrl.Stdout, ctrl.Stderr = ctrlLog, ctrlLog
	if err := ctrl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ctrl.Process.Signal(os.Interrupt)
		_ = ctrl.Wait()
		if t.Failed() {
			h.serveMu.Lock()
			t.Logf("controller's log:\n%s", tail(ctrlLog.b.String(), 30))
			h.serveMu.Unlock()
		}
	})

	h.apply(fmt.Sprintf(`{"apiVersion":"policies.tollgate.dev/v1","kind":"PolicyServer","metadata":{"name":"default"},
	  "spec":{"image":"tollgate:test","replicas":1,"insecureSources":[%q]}}`, reg.Host))
	h.startServer(root)

	// The CRDs: the history limit's default, an empty shadow refused.
	rules := []v1.RuleWithOperations{{Operations: []v1.OperationType{"CREATE"}, APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	empty := &v1.ClusterAdmissionPolicy{TypeMeta: policyType, ObjectMeta: metav1.ObjectMeta{Name: "empty-shadow"}}
	empty.Spec.Rules, empty.Spec.Module, empty.Spec.Shadow = rules, reg.URI("labels:v1"), &v1.PolicyShadow{}
	if _, err := h.tryApply(empty); err == nil || !strings.Contains(err.Error(), "a shadow needs module and/or settings") {
		t.Fatalf("a policy with an empty shadow: %v", err)
	}

	settings := testfixture.File(t, "examples/required-labels/testdata/settings.json")
	p := &v1.ClusterAdmissionPolicy{TypeMeta: policyType, ObjectMeta: metav1.ObjectMeta{Name: "labels", Annotations: map[string]string{v1.ChangeCauseAnnotation: "v1: owner required"}}}
	p.Spec.Rules, p.Spec.Module = rules, reg.URI("labels:v1")
	p.Spec.Settings = runtime.RawExtension{Raw: settings}
	p.Spec.Shadow = &v1.PolicyShadow{Settings: &runtime.RawExtension{Raw: []byte(`{"mandatory_labels":["owner","cost-center"]}`)}}
	h.apply(p)
	h.get(p)
	if p.Spec.RevisionHistoryLimit == nil || *p.Spec.RevisionHistoryLimit != 10 {
		t.Fatalf("spec.revisionHistoryLimit %v, want the default 10", p.Spec.RevisionHistoryLimit)
	}
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	revision := func(n int64) *v1.RevisionStatus {
		var st *v1.RevisionStatus
		h.waitFor(fmt.Sprintf("revision %d active", n), 3*time.Minute, func() error {
			if err := h.tryGet(p); err != nil {
				return err
			}
			if st = p.Status.Revision; st == nil || st.Number != n || p.Status.PolicyStatus != v1.PolicyStatusActive {
				return fmt.Errorf("status %s, revision %+v", p.Status.PolicyStatus, st)
			}
			return nil
		})
		return st
	}
	r1 := revision(1)
	served, err := h.servedDigest(id)
	if err != nil || served.ManifestDigest != m1 || r1.ModuleDigest != served.Digest {
		t.Fatalf("revision 1 %+v; served %+v %v; want manifest %s", r1, served, err, m1)
	}
	cm, err := h.c.Client.CoreV1().ConfigMaps(ns).Get(ctx, v1.PolicyServerObjectName("default"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var entries map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(cm.Data[v1.PoliciesKey]), &entries); err != nil {
		t.Fatal(err)
	}
	var shadow bytes.Buffer
	_ = json.Compact(&shadow, entries[id]["shadow"])
	if shadow.String() != `{"settings":{"mandatory_labels":["owner","cost-center"]}}` {
		out, _, _ := h.c.Kubectl(ctx, "get", "clusteradmissionpolicy", "labels", "-o", "yaml")
		t.Fatalf("the shadow is not in policies.yml:\n%s\nthe policy:\n%s", cm.Data[v1.PoliciesKey], out)
	}

	// v2: a new module (no settings), a new cause.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"v2: drop capabilities"}},"spec":{"module":%q,"settings":null,"shadow":null}}`,
		v1.ChangeCauseAnnotation, reg.URI("labels:v2"))
	if _, stderr, err := h.c.Kubectl(ctx, "patch", "clusteradmissionpolicy", "labels", "--type=merge", "-p", patch); err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, stderr)
	}
	revision(2)

	out, err := h.tollgate("rollout", "history", "cap/labels", "--kubeconfig", h.c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	want := "clusteradmissionpolicy.policies.tollgate.dev/labels \nREVISION  CHANGE-CAUSE\n1         v1: owner required\n2         v2: drop capabilities\n\n"
	if out != want {
		t.Fatalf("rollout history:\n%q\nwant\n%q", out, want)
	}

	// Undo with the registry stopped: the server takes v1 from its store, by digest.
	reg.Stop()
	start := time.Now()
	out, err = h.tollgate("rollout", "undo", "labels", "--kubeconfig", h.c.Kubeconfig)
	if err != nil || out != "clusteradmissionpolicy.policies.tollgate.dev/labels rolled back\n" {
		t.Fatalf("rollout undo: %q %v", out, err)
	}
	undone := time.Since(start)
	loaded := h.waitFor("v1 served again", 2*time.Minute, func() error {
		s, err := h.servedDigest(id)
		if err == nil && s.Digest != served.Digest {
			err = fmt.Errorf("serves %s, want %s", s.Digest, served.Digest)
		}
		return err
	})
	r3 := revision(3)
	t.Logf("undo with the registry stopped: the command took %v; served %v after it; revision 3 in status %v after the command", undone.Round(time.Millisecond), loaded.Round(time.Millisecond), time.Since(start).Round(time.Millisecond)-undone.Round(time.Millisecond))
	if r3.Name != r1.Name || p.Spec.Module != reg.URI("labels:v1@"+m1) || string(p.Spec.Settings.Raw) == "" {
		t.Fatalf("after the undo: revision %+v (want %s), module %s, settings %s", r3, r1.Name, p.Spec.Module, p.Spec.Settings.Raw)
	}
	h.serveMu.Lock()
	asked := strings.Contains(h.serveLg.String(), "registry unreachable")
	h.serveMu.Unlock()
	if asked {
		t.Fatal("the policy server asked the stopped registry for a pinned module")
	}

	out, err = h.tollgate("rollout", "history", "cap/labels", "--kubeconfig", h.c.Kubeconfig, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var revs []struct {
		Revision int64
		Current  bool
		Data     v1.RevisionData
	}
	if err := json.Unmarshal([]byte(out), &revs); err != nil {
		t.Fatalf("history -o json: %v\n%s", err, out)
	}
	if len(revs) != 2 || revs[0].Revision != 2 || revs[1].Revision != 3 || !revs[1].Current || revs[1].Data.ManifestDigest != m1 || revs[0].Data.ManifestDigest != m2 {
		t.Fatalf("history -o json:\n%s", out)
	}
	out, err = h.tollgate("rollout", "undo", "cap", "labels", "--to-revision", "3", "--kubeconfig", h.c.Kubeconfig)
	if err != nil || !strings.Contains(out, "skipped rollback (current template already matches revision 3)") {
		t.Fatalf("undo to the serving revision: %q %v", out, err)
	}

	// Two undos at once, the second before the controller recorded the first: the second
	// restores what the spec held before the first (v1 again), not the revision before the one
	// status still names.
	for range 2 {
		if out, err := h.tollgate("rollout", "undo", "cap/labels", "--kubeconfig", h.c.Kubeconfig); err != nil || !strings.Contains(out, "rolled back") {
			t.Fatalf("rollout undo: %q %v", out, err)
		}
	}
	h.get(p)
	if p.Spec.Module != reg.URI("labels:v1@"+m1) {
		t.Fatalf("after two undos at once: module %s, want v1 pinned", p.Spec.Module)
	}
	h.waitFor("v1 served after two undos", 2*time.Minute, func() error {
		s, err := h.servedDigest(id)
		if err == nil && s.Digest != served.Digest {
			err = fmt.Errorf("serves %s, want %s", s.Digest, served.Digest)
		}
		return err
	})

	// audit --compare: a candidate that also requires cost-center, against the active policy
	// (the undone v1, from the registry again), over Pods in kube-system (a namespace the
	// policies' webhooks skip): only the Pod the candidate would deny is listed.
	reg.Restart(t)
	pods := map[string]map[string]string{
		"owner-only": {"owner": "alice", "app.kubernetes.io/name": "web"},
		"complete":   {"owner": "alice", "app.kubernetes.io/name": "web", "cost-center": "cc1"},
		"bare":       nil,
	}
	for name, labels := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/app:1"}}}}
		if _, err := h.c.Client.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	candidate := filepath.Join(h.dir, "candidate.yaml")
	manifest := fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata: {name: labels}
spec:
  module: %s
  settings: {mandatory_labels: [owner, cost-center]}
  rules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE]}]
  mutating: false
`, testfixture.Path("examples/required-labels/policy.wasm"))
	if err := os.WriteFile(candidate, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	auditArgs := []string{"audit", "--policy", candidate, "--compare", "--kubeconfig", h.c.Kubeconfig, "--sources-path", reg.SourcesPath, "--cache-dir", filepath.Join(h.dir, "audit-cache")}
	out, err = h.tollgate(append(auditArgs, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var changes []struct {
		Object                    struct{ Kind, Namespace, Name string }
		Change, Active, Candidate string
	}
	if err := json.Unmarshal([]byte(out), &changes); err != nil {
		t.Fatalf("audit --compare -o json: %v\n%s", err, out)
	}
	if len(changes) != 1 || changes[0].Object.Name != "owner-only" || changes[0].Object.Kind != "Pod" || changes[0].Change != "verdict" ||
		changes[0].Active != "allowed" || !strings.Contains(changes[0].Candidate, "cost-center") {
		t.Fatalf("audit --compare -o json:\n%s", out)
	}
	out, err = h.tollgate(auditArgs...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAMESPACE") || !strings.Contains(lines[1], "owner-only") || !strings.Contains(lines[1], "verdict") {
		t.Fatalf("audit --compare:\n%s", out)
	}

	// A group: its revision holds its expression, an edit of the expression alone is a
	// revision, and an undo restores the expression with the members.
	h.apply(fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicyGroup
metadata:
  name: either
  annotations: {%q: "owner or team"}
spec:
  policyServer: default
  rules: [{apiGroups: [""], apiVersions: [v1], resources: [configmaps], operations: [CREATE]}]
  policies:
    owner: {module: %q, settings: {mandatory_labels: [owner]}}
    team: {module: %q, settings: {mandatory_labels: [team]}}
  expression: "owner() || team()"
  message: needs an owner or a team label
`, v1.ChangeCauseAnnotation, reg.URI("labels:v1"), reg.URI("labels:v1")))
	var g v1.ClusterAdmissionPolicyGroup
	groupRevision := func(n int64) *v1.RevisionStatus {
		var st *v1.RevisionStatus
		h.waitFor(fmt.Sprintf("the group's revision %d active", n), 3*time.Minute, func() error {
			out, stderr, err := h.c.Kubectl(ctx, "get", "clusteradmissionpolicygroup", "either", "-o", "json")
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			g = v1.ClusterAdmissionPolicyGroup{}
			if err := yaml.Unmarshal([]byte(out), &g); err != nil {
				return err
			}
			if st = g.Status.Revision; st == nil || st.Number != n || g.Status.PolicyStatus != v1.PolicyStatusActive {
				return fmt.Errorf("status %s, revision %+v", g.Status.PolicyStatus, st)
			}
			return nil
		})
		return st
	}
	g1 := groupRevision(1)
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:"owner and team"}},"spec":{"expression":"owner() && team()"}}`, v1.ChangeCauseAnnotation)
	if _, stderr, err := h.c.Kubectl(ctx, "patch", "clusteradmissionpolicygroup", "either", "--type=merge", "-p", patch); err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, stderr)
	}
	groupRevision(2)
	out, err = h.tollgate("rollout", "undo", "capg/either", "--kubeconfig", h.c.Kubeconfig)
	if err != nil || out != "clusteradmissionpolicygroup.policies.tollgate.dev/either rolled back\n" {
		t.Fatalf("rollout undo of the group: %q %v", out, err)
	}
	g3 := groupRevision(3)
	if g.Spec.Expression != "owner() || team()" || g3.Name != g1.Name || g.Annotations[v1.ChangeCauseAnnotation] != "owner or team" {
		t.Fatalf("after the group's undo: expression %q, revision %+v (want %s), annotations %v", g.Spec.Expression, g3, g1.Name, g.Annotations)
	}
	out, err = h.tollgate("rollout", "history", "capg/either", "--kubeconfig", h.c.Kubeconfig, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	revs = nil
	if err := json.Unmarshal([]byte(out), &revs); err != nil {
		t.Fatalf("history -o json: %v\n%s", err, out)
	}
	if len(revs) != 2 || revs[0].Revision != 2 || revs[0].Data.Expression != "owner() && team()" || revs[1].Revision != 3 || !revs[1].Current ||
		revs[1].Data.Expression != "owner() || team()" || len(revs[1].Data.Policies) != 2 {
		t.Fatalf("the group's history -o json:\n%s", out)
	}
}

// startServer plays the kubelet for PolicyServer "default": once the controller wrote its
// ConfigMap, it writes policies.yml and sources.yml, runs `tollgate serve` watching the
// ConfigMap, and publishes it in an EndpointSlice of the server's Service.
func (h *harness) startServer(root string) {
	t := h.t
	var cm *corev1.ConfigMap
	h.waitFor("the server's ConfigMap", 2*time.Minute, func() (err error) {
		cm, err = h.c.Client.CoreV1().ConfigMaps(ns).Get(h.ctx, v1.PolicyServerObjectName("default"), metav1.GetOptions{})
		return err
	})
	for key, file := range map[string]string{v1.PoliciesKey: "policies.yml", v1.SourcesKey: "sources.yml"} {
		if err := os.WriteFile(filepath.Join(h.dir, file), []byte(cm.Data[key]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port, probe := freePort(t), freePort(t)
	cmd := exec.CommandContext(h.ctx, h.bin, "serve", "--addr=127.0.0.1", "--port="+strconv.Itoa(port), "--readiness-probe-port="+strconv.Itoa(probe),
		"--insecure-http", "--policies="+filepath.Join(h.dir, "policies.yml"), "--sources-path="+filepath.Join(h.dir, "sources.yml"),
		"--policies-configmap="+ns+"/"+v1.PolicyServerObjectName("default"), "--kubeconfig="+h.c.Kubeconfig,
		"--cache-dir="+filepath.Join(h.dir, "cache"))
	w := &lockedWriter{mu: &h.serveMu, b: &h.serveLg}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	h.probes = "http://127.0.0.1:" + strconv.Itoa(probe)
	h.waitFor("serve's probe port", 2*time.Minute, func() error {
		resp, err := http.Get(h.probes + "/policies")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	readiness, webhook := v1.ServicePortReadiness, v1.ServicePortWebhook
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1.PolicyServerObjectName("default") + "-harness",
			Labels: map[string]string{discoveryv1.LabelServiceName: v1.PolicyServerObjectName("default")}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &readiness, Port: ptr.To(int32(probe))}, {Name: &webhook, Port: ptr.To(int32(port))}},
	}
	if _, err := h.c.Client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, sl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

var policyType = metav1.TypeMeta{APIVersion: "policies.tollgate.dev/v1", Kind: "ClusterAdmissionPolicy"}

// tryApply creates or updates obj (JSON or YAML, or an object marshalled to JSON) with kubectl
// apply --server-side.
func (h *harness) tryApply(obj any) (string, error) {
	b, ok := obj.(string)
	if !ok {
		js, err := json.Marshal(obj)
		if err != nil {
			return "", err
		}
		b = string(js)
	}
	out, stderr, err := h.c.KubectlWithInput(h.ctx, strings.NewReader(b), "apply", "--server-side", "-f", "-")
	if err != nil {
		return out, fmt.Errorf("%v: %s", err, stderr)
	}
	return out, nil
}

func (h *harness) apply(obj any) {
	h.t.Helper()
	if _, err := h.tryApply(obj); err != nil {
		h.t.Fatalf("kubectl apply: %v", err)
	}
}

// tryGet reads the ClusterAdmissionPolicy p (by name) into p.
func (h *harness) tryGet(p *v1.ClusterAdmissionPolicy) error {
	out, stderr, err := h.c.Kubectl(h.ctx, "get", "clusteradmissionpolicy", p.Name, "-o", "json")
	if err != nil {
		return fmt.Errorf("%v: %s", err, stderr)
	}
	*p = v1.ClusterAdmissionPolicy{}
	return yaml.Unmarshal([]byte(out), p)
}

func (h *harness) get(p *v1.ClusterAdmissionPolicy) {
	h.t.Helper()
	if err := h.tryGet(p); err != nil {
		h.t.Fatal(err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
