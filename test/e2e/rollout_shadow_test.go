package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// The policy and namespace of TestOperatorShadowPromotion, and of TestOperatorAuditCompare.
const (
	shadowNS      = "e2e-shadow"
	shadowPolicy  = "shadow-labels"
	compareNS     = "e2e-compare"
	comparePolicy = "compare-labels"
)

// shadowRequests is how many Pods with only an owner label TestOperatorShadowPromotion creates
// while the shadow needs cost-center too (the 30).
const shadowRequests = 30

// TestOperatorShadowPromotion (issue 32): on the real node, a ClusterAdmissionPolicy serving
// required-labels with mandatory_labels [owner] and a spec.shadow needing [owner, cost-center].
// 30 Pods carrying only owner, created through the apiserver, are all admitted, and the policy's
// status.shadow reports them as verdict divergences within seconds (the time from the first
// request to the status showing them is logged; the ceiling is 60 s): the evaluations and the
// dropped evaluations add up to the 30 requests, every evaluation diverged on the verdict, and
// status.shadow.recent names the last diverging Pods (uid, kind, namespace/name, both answers).
// Adding the shadow made no revision. Then the promotion by an ordinary edit (the candidate's
// settings become spec.settings, spec.shadow goes) under steady load (2 workers creating Pods
// with both labels and with none): 0 failed requests, a Pod without cost-center denied, the
// status.shadow gone, and `tollgate rollout history` lists one new revision, current, holding
// the promoted settings.
func TestOperatorShadowPromotion(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	t.Cleanup(func() {
		op.deleteAll(t, []string{"ClusterAdmissionPolicy/" + shadowPolicy})
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := op.cs.CoreV1().Pods(shadowNS).DeleteCollection(cctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Errorf("deleting the Pods of %s: %v", shadowNS, err)
		}
	})
	apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", shadowPolicy, policySpec{
		module: op.requiredWasm, settings: `{"mandatory_labels": ["owner"]}`, resources: "pods", namespace: shadowNS,
	}))
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", shadowPolicy, "active", 60*time.Second)
	eventually(t, 30*time.Second, func() error {
		if err := createPod(ctx, op.cs, shadowNS, nil, nil); err == nil || !strings.Contains(err.Error(), `mandatory label "owner" is missing`) {
			return fmt.Errorf("a Pod without owner: want the policy's denial, got %v", err)
		}
		return nil
	})
	tollgate := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, env.bin, append(args, "--kubeconfig", env.cluster.Kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tollgate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	history := func() []histRevision {
		t.Helper()
		var revs []histRevision
		out := tollgate("rollout", "history", "cap/"+shadowPolicy, "-o", "json")
		if err := json.Unmarshal([]byte(out), &revs); err != nil {
			t.Fatalf("rollout history -o json: %v\n%s", err, out)
		}
		return revs
	}
	var before []histRevision
	eventually(t, 30*time.Second, func() error {
		before = history()
		if len(before) == 0 || !before[len(before)-1].Current || !sameSettings(before[len(before)-1].Data.Settings, `{"mandatory_labels":["owner"]}`) {
			return fmt.Errorf("history: %+v, want the serving revision [owner] last and current", before)
		}
		return nil
	})

	// The candidate, watched on live requests.
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", shadowPolicy, `{"shadow": {"settings": {"mandatory_labels": ["owner", "cost-center"]}}}`)
	var base *v1.ShadowStatus
	eventually(t, 60*time.Second, func() error {
		st, err := op.shadowStatus(ctx, shadowPolicy)
		if err != nil {
			return err
		}
		if st == nil || st.State != "ready" {
			return fmt.Errorf("status.shadow %+v, want state ready", st)
		}
		base = st
		return nil
	})
	t.Logf("status.shadow before the requests: %+v", *base)

	var created []string
	first := time.Now()
	for range shadowRequests {
		name, err := createPodNamed(ctx, op.cs, shadowNS, map[string]string{"owner": "alice"}, nil)
		if err != nil {
			t.Fatalf("a Pod with owner, the serving settings' only label: %v (admitted so far: %d)", err, len(created))
		}
		created = append(created, name)
	}
	sent := time.Since(first)
	var st *v1.ShadowStatus
	var seen time.Duration // from the first request to the status showing a divergence
	eventually(t, 60*time.Second, func() error {
		var err error
		if st, err = op.shadowStatus(ctx, shadowPolicy); err != nil || st == nil {
			return fmt.Errorf("status.shadow %+v: %v", st, err)
		}
		if seen == 0 && st.Divergences["verdict"] > base.Divergences["verdict"] {
			seen = time.Since(first)
		}
		if n := st.Evaluations - base.Evaluations + sum(st.Dropped) - sum(base.Dropped); n < shadowRequests {
			return fmt.Errorf("status.shadow accounts for %d of the %d requests: %+v", n, shadowRequests, *st)
		}
		return nil
	})
	all := time.Since(first)
	evals, dropped := st.Evaluations-base.Evaluations, sum(st.Dropped)-sum(base.Dropped)
	verdict := st.Divergences["verdict"] - base.Divergences["verdict"]
	line := fmt.Sprintf("e2e: shadow divergences in status: first after %v, all %d after %v (the %d requests took %v); evaluations=%d dropped=%d verdict_divergences=%d",
		seen.Round(time.Millisecond), shadowRequests, all.Round(time.Millisecond), shadowRequests, sent.Round(time.Millisecond), evals, dropped, verdict)
	t.Log(line)
	fmt.Println(line)
	if seen > 60*time.Second || all > 60*time.Second {
		t.Errorf("status.shadow showed the divergences %v and %v after the first request: the ceiling is 60 s", seen, all)
	}
	// Every request was compared or dropped for lack of capacity, each comparison diverged on
	// the verdict and on nothing else.
	if evals+dropped != shadowRequests || verdict != evals || evals < shadowRequests/2 {
		t.Errorf("after %d requests: %d evaluations, %d dropped, %d verdict divergences; status.shadow %+v (before: %+v)",
			shadowRequests, evals, dropped, verdict, *st, *base)
	}
	for kind, n := range st.Divergences {
		if kind != "verdict" && n != base.Divergences[kind] {
			t.Errorf("%d %s divergences from Pods both versions answer alike but for the verdict", n-base.Divergences[kind], kind)
		}
	}
	if st.State != "ready" {
		t.Errorf("status.shadow.state %q, want ready", st.State)
	}
	// The last diverging requests, newest first: these Pods, never their content.
	if want := min(int(verdict), 5); len(st.Recent) != want {
		t.Errorf("status.shadow.recent has %d requests, want %d: %+v", len(st.Recent), want, st.Recent)
	}
	var recent []string
	for _, d := range st.Recent {
		recent = append(recent, d.Name)
		if d.UID == "" || d.Kind != "Pod" || d.Namespace != shadowNS || !slices.Contains(created, d.Name) || d.Operation != "CREATE" ||
			d.Divergence != "verdict" || d.Serving != "allowed" || !strings.HasPrefix(d.Shadow, "denied") || !strings.Contains(d.Shadow, `mandatory label "cost-center" is missing`) {
			t.Errorf("status.shadow.recent: %+v, want one of the Pods created with only owner, allowed by the serving version and denied by the shadow for cost-center", d)
		}
	}
	if dropped == 0 {
		want := slices.Clone(created[len(created)-min(len(created), 5):])
		slices.Reverse(want)
		if !slices.Equal(recent, want) {
			t.Errorf("status.shadow.recent names %v, want the last Pods created, newest first: %v", recent, want)
		}
	}
	example, _ := json.MarshalIndent(st, "", "  ")
	t.Logf("status.shadow after the requests:\n%s", example)
	if revs := history(); len(revs) != len(before) || revs[len(revs)-1].Name != before[len(before)-1].Name {
		t.Errorf("adding spec.shadow changed the history: %+v -> %+v", before, revs)
	}

	// Promotion under steady load: Pods with both labels admitted, Pods without one denied,
	// before and after the edit.
	create := func(ctx context.Context, labels map[string]string) error {
		return createPod(ctx, op.cs, shadowNS, labels, nil)
	}
	l := startLoadOf(ctx, op.cs, shadowNS, create, map[string]string{"owner": "alice", "cost-center": "cc-1"}, 2, 20000, 2*time.Minute)
	defer l.stop()
	time.Sleep(2 * time.Second)
	promoted, _ := switchUnderLoad(t, l, "shadow promotion by edit to enforce on real pods", "promotions", 1, func(int) string {
		op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", shadowPolicy, `{"settings": {"mandatory_labels": ["owner", "cost-center"]}, "shadow": null}`)
		return "cost-center"
	})
	if promoted > 2*time.Second {
		t.Errorf("promotion to enforce %v: the target is 2 s (apply-to-enforce's max)", promoted)
	}
	if l.denied.Load() == 0 || l.total.Load() < 20 {
		t.Errorf("the load made %d requests, %d denied: not a steady load", l.total.Load(), l.denied.Load())
	}
	if err := createPod(ctx, op.cs, shadowNS, map[string]string{"owner": "alice"}, nil); err == nil || !strings.Contains(err.Error(), `mandatory label "cost-center" is missing`) {
		t.Errorf("after the promotion, a Pod without cost-center: want the policy's denial, got %v", err)
	}
	if err := createPod(ctx, op.cs, shadowNS, map[string]string{"owner": "alice", "cost-center": "cc-1"}, nil); err != nil {
		t.Errorf("after the promotion, a Pod with owner and cost-center: %v", err)
	}
	eventually(t, 30*time.Second, func() error {
		st, err := op.shadowStatus(ctx, shadowPolicy)
		if err != nil || st != nil {
			return fmt.Errorf("status.shadow %+v after the promotion, want none (%v)", st, err)
		}
		return nil
	})
	var after []histRevision
	eventually(t, 30*time.Second, func() error {
		after = history()
		if len(after) != len(before)+1 {
			return fmt.Errorf("history %+v, want one revision more than %+v", after, before)
		}
		return nil
	})
	last, prev := after[len(after)-1], after[len(after)-2]
	if !last.Current || last.Revision != prev.Revision+1 || prev.Name != before[len(before)-1].Name ||
		!sameSettings(last.Data.Settings, `{"mandatory_labels":["owner","cost-center"]}`) || !sameSettings(prev.Data.Settings, `{"mandatory_labels":["owner"]}`) ||
		last.Data.ModuleDigest == "" || last.Data.ModuleDigest != prev.Data.ModuleDigest {
		t.Errorf("history after the promotion: %+v; want a new current revision %d with the promoted settings, the same module", after, prev.Revision+1)
	}
	t.Logf("history after the promotion:\n%s", tollgate("rollout", "history", "cap/"+shadowPolicy))
}

// histRevision is a revision as `tollgate rollout history -o json` prints it.
type histRevision struct {
	Revision int64
	Name     string
	Current  bool
	Data     struct {
		Module, ModuleDigest, ManifestDigest string
		Settings                             json.RawMessage
	}
}

// sameSettings compares settings as JSON values.
func sameSettings(got json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// shadowStatus returns the ClusterAdmissionPolicy's status.shadow (nil when it has none).
func (op *operator) shadowStatus(ctx context.Context, name string) (*v1.ShadowStatus, error) {
	obj, err := op.dyn.Resource(policyGVR["ClusterAdmissionPolicy"]).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	m, found, err := unstructured.NestedMap(obj.Object, "status", "shadow")
	if err != nil || !found {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var st v1.ShadowStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("status.shadow %s: %w", b, err)
	}
	return &st, nil
}

// TestOperatorAuditCompare (issue 32): `tollgate audit --policy CANDIDATE.yaml --compare` on the
// real node. Six Pods exist (five in e2e-compare, one elsewhere) and an active policy requires
// owner on Pods in e2e-compare; the candidate of the same name requires cost-center instead. The
// command lists exactly the Pods whose verdict changes (owner-only and owner-team now denied,
// cost-only now admitted), by namespace/name, in -o json and in the table, and not the Pods both
// versions admit or both deny, nor the one the policy's namespaceSelector leaves out.
func TestOperatorAuditCompare(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.deleteAll(t, []string{"ClusterAdmissionPolicy/" + comparePolicy}) // its webhook would refuse some Pods below
	pods := map[string]map[string]string{
		compareNS + "/both":       {"owner": "o", "cost-center": "c"}, // admitted by both
		compareNS + "/owner-only": {"owner": "o"},                     // admitted, then denied
		compareNS + "/owner-team": {"owner": "o", "team": "t"},        // admitted, then denied
		compareNS + "/cost-only":  {"cost-center": "c"},               // denied, then admitted
		compareNS + "/bare":       nil,                                // denied by both, with other messages
		"e2e-a/compare-outside":   {"owner": "o"},                     // not in the policy's namespaces
	}
	t.Cleanup(func() {
		op.deleteAll(t, []string{"ClusterAdmissionPolicy/" + comparePolicy})
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for key := range pods {
			ns, name, _ := strings.Cut(key, "/")
			if err := op.cs.CoreV1().Pods(ns).Delete(cctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting Pod %s: %v", key, err)
			}
		}
	})
	for key, labels := range pods {
		ns, name, _ := strings.Cut(key, "/")
		_ = op.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}) // an earlier run's
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
				SchedulingGates: []corev1.PodSchedulingGate{{Name: "e2e.tollgate.dev/never"}}}}
		eventually(t, 30*time.Second, func() error {
			_, err := op.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
	}
	apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", comparePolicy, policySpec{
		module: op.requiredWasm, settings: `{"mandatory_labels": ["owner"]}`, resources: "pods", namespace: compareNS,
	}))
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", comparePolicy, "active", 60*time.Second)

	dir := t.TempDir()
	candidate := filepath.Join(dir, "candidate.yaml")
	manifest := fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: %s
spec:
  module: %s
  settings: {mandatory_labels: [cost-center]}
  mutating: false
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
  namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [%s]}
`, comparePolicy, filepath.Join(env.root, "examples", "required-labels", "policy.wasm"), compareNS)
	sources := filepath.Join(dir, "sources.yml")
	if err := os.WriteFile(candidate, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	// The active policy's module comes from the cluster's registry, as the servers' pods reach it.
	if err := os.WriteFile(sources, []byte("insecure_sources: [\""+cluster.PodRegistryHost+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) (string, string) {
		t.Helper()
		args := append([]string{"audit", "--policy", candidate, "--compare", "--kubeconfig", env.cluster.Kubeconfig,
			"--tollgate-namespace", controllerNS, "--sources-path", sources, "--store-path", filepath.Join(dir, "store"), "--cache-dir", filepath.Join(dir, "cache")}, extra...)
		cmd := exec.CommandContext(ctx, env.bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		begin := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("tollgate %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		t.Logf("tollgate audit --compare %s: %v; %s", strings.Join(extra, " "), time.Since(begin).Round(time.Millisecond), strings.TrimSpace(lastLine(stderr.String())))
		return stdout.String(), stderr.String()
	}
	want := map[string]string{ // namespace/name: active answer, candidate answer
		compareNS + "/owner-only": `allowed|denied: .*mandatory label "cost-center" is missing`,
		compareNS + "/owner-team": `allowed|denied: .*mandatory label "cost-center" is missing`,
		compareNS + "/cost-only":  `denied: .*mandatory label "owner" is missing|allowed`,
	}
	out, stderr := run("-o", "json")
	var changes []struct {
		Object                    struct{ APIVersion, Kind, Namespace, Name string }
		Change, Active, Candidate string
	}
	if err := json.Unmarshal([]byte(out), &changes); err != nil {
		t.Fatalf("audit --compare -o json: %v\n%s", err, out)
	}
	var listed []string
	for _, c := range changes {
		key := c.Object.Namespace + "/" + c.Object.Name
		listed = append(listed, key)
		answers, ok := want[key]
		if !ok {
			t.Errorf("audit --compare -o json lists %s, whose verdict does not change: %+v", key, c)
			continue
		}
		active, cand, _ := strings.Cut(answers, "|")
		if c.Object.Kind != "Pod" || c.Object.APIVersion != "v1" || c.Change != "verdict" ||
			!regexp.MustCompile("^"+active+"$").MatchString(c.Active) || !regexp.MustCompile("^"+cand+"$").MatchString(c.Candidate) {
			t.Errorf("audit --compare -o json: %+v, want a verdict change of Pod %s from %q to %q", c, key, active, cand)
		}
	}
	sort.Strings(listed)
	if wantKeys := slices.Sorted(maps.Keys(want)); !slices.Equal(listed, wantKeys) {
		t.Errorf("audit --compare -o json lists %v, want exactly %v:\n%s", listed, wantKeys, out)
	}
	// The five Pods of e2e-compare were evaluated, and only they.
	if !strings.Contains(stderr, " 5 evaluated:") || !strings.Contains(stderr, "; 3 object(s) would change") {
		t.Errorf("audit --compare's summary: %s; want 5 objects evaluated and 3 that would change", stderr)
	}

	table, _ := run()
	t.Logf("audit --compare:\n%s", table)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 1+len(want) || !regexp.MustCompile(`^NAMESPACE +KIND +NAME +CHANGE +ACTIVE +CANDIDATE$`).MatchString(lines[0]) {
		t.Fatalf("audit --compare: want a header and %d rows:\n%s", len(want), table)
	}
	for i, key := range slices.Sorted(maps.Keys(want)) { // sorted by namespace, kind, name
		ns, name, _ := strings.Cut(key, "/")
		active, _, _ := strings.Cut(want[key], "|")
		if row := `^` + ns + ` +Pod +` + name + ` +verdict +` + strings.SplitN(active, ":", 2)[0]; !regexp.MustCompile(row).MatchString(lines[1+i]) {
			t.Errorf("audit --compare row %d: %q, want %s", i+1, lines[1+i], row)
		}
	}
}
