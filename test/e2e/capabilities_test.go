package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCapabilities runs `tollgate run --allow-context-aware --kubeconfig` on a context-aware
// policy (the misbehave fixture annotated with contextAwareResources, whose settings name the
// host call it makes) against live objects of the real kube-apiserver: get, list with label and
// field selectors, not-found and undeclared-kind errors, can_i through SubjectAccessReview, a
// recorded session replayed without the cluster, and bench answering from the informer cache.
func TestCapabilities(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.cluster
	for name, labels := range map[string]map[string]string{
		"cap-labelled": {"cost-center": "cc-1"},
		"cap-bare":     nil,
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}

	dir := t.TempDir()
	md := filepath.Join(dir, "metadata.yml")
	if err := os.WriteFile(md, []byte("rules:\n- {apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}\n"+
		"mutating: false\ncontextAwareResources:\n- {apiVersion: v1, kind: Namespace}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.wasm")
	tollgateRun(t, ctx, "annotate", "-m", md, "-o", policy, filepath.Join(env.root, "test/testdata/policies/misbehave/policy.raw.wasm"))
	req := filepath.Join(env.root, "examples/capabilities-drop/testdata/pod-adds-capabilities.json")
	hostcall := func(op string, payload any) string {
		b, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": "kubernetes", "operation": op, "payload": payload})
		return string(b)
	}
	live := []string{"--allow-context-aware", "--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(env.dir, "wasm-cache")}
	message := func(args ...string) string {
		t.Helper()
		out, _ := tollgateRun(t, ctx, append([]string{"run", policy, "-r", req}, args...)...)
		var r struct {
			Status struct{ Message string } `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return r.Status.Message
	}

	getLabelled := hostcall("get_resource", map[string]any{"api_version": "v1", "kind": "Namespace", "name": "cap-labelled", "namespace": "", "disable_cache": false})
	listSelected := hostcall("list_resources_all", map[string]any{"api_version": "v1", "kind": "Namespace", "label_selector": "cost-center", "field_masks": []string{"metadata.name"}})
	tests := []struct {
		name, settings string
		want, notWant  []string
	}{
		{"get", getLabelled, []string{`host answered: {"apiVersion":"v1","kind":"Namespace"`, `"cost-center":"cc-1"`, `"name":"cap-labelled"`}, []string{"managedFields"}},
		{"get missing", hostcall("get_resource", map[string]any{"api_version": "v1", "kind": "Namespace", "name": "cap-none", "disable_cache": false}),
			[]string{"host call failed: Host error: Callback evaluation failure: Cannot find v1/Namespace named 'cap-none' inside of namespace 'None'"}, nil},
		{"list by label", listSelected, []string{`"kind":"NamespaceList"`, `"name":"cap-labelled"`}, []string{"cap-bare"}},
		{"list by field", hostcall("list_resources_all", map[string]any{"api_version": "v1", "kind": "Namespace", "field_selector": "metadata.name=cap-bare"}),
			[]string{`"name":"cap-bare"`}, []string{"cap-labelled"}},
		{"undeclared kind", hostcall("list_resources_by_namespace", map[string]any{"api_version": "v1", "kind": "Secret", "namespace": "default"}),
			[]string{"Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported."}, nil},
		{"can_i allowed", hostcall("can_i", map[string]any{"subject_access_review": map[string]any{"user": "someone", "groups": []string{"system:masters"},
			"resource_attributes": map[string]any{"resource": "pods", "verb": "create", "namespace": "default"}}, "disable_cache": false}),
			[]string{`host answered: {"allowed":true`}, nil},
		{"can_i denied", hostcall("can_i", map[string]any{"subject_access_review": map[string]any{"user": "nobody",
			"resourceAttributes": map[string]any{"resource": "secrets", "verb": "get", "namespace": "default"}}, "disable_cache": true}),
			[]string{`host answered: {"allowed":false`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := message(append([]string{"--settings-json", tt.settings}, live...)...)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("message lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("message has %q:\n%s", w, got)
				}
			}
		})
	}

	t.Run("namespace-label policy decides by live namespaces", func(t *testing.T) {
		nsPolicy := filepath.Join(env.root, "test/testdata/policies/namespace-label/policy.wasm")
		if _, err := os.Stat(nsPolicy); err != nil {
			t.Fatalf("%v: run make policies", err)
		}
		for ns, want := range map[string]string{
			"cap-labelled": `"allowed":true`,
			"cap-bare":     `"allowed":false,"status":{"message":"namespace cap-bare has no label cost-center","code":403}`,
			"cap-none":     `cannot read namespace cap-none: Host error: Callback evaluation failure: Cannot find v1/Namespace named 'cap-none' inside of namespace 'None'`,
		} {
			review := filepath.Join(dir, "review-"+ns+".json")
			if err := os.WriteFile(review, []byte(`{"uid":"u-`+ns+`","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"`+ns+
				`","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"`+ns+`"}}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _ := tollgateRun(t, ctx, append([]string{"run", nsPolicy, "-r", review, "--settings-json", `{"label":"cost-center"}`}, live...)...)
			if !strings.Contains(out, want) {
				t.Errorf("%s: %s\nwant %s", ns, out, want)
			}
		}
	})

	t.Run("record then replay without the cluster", func(t *testing.T) {
		session := filepath.Join(dir, "session.yml")
		recorded := message(append([]string{"--settings-json", getLabelled, "--record-host-capabilities-interactions", session}, live...)...)
		replayed := message("--settings-json", getLabelled, "--allow-context-aware", "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"),
			"--replay-host-capabilities-interactions", session)
		if replayed != recorded || !strings.Contains(recorded, "cc-1") {
			t.Fatalf("replayed %q\nrecorded %q", replayed, recorded)
		}
	})

	t.Run("bench answers from the cache", func(t *testing.T) {
		session := filepath.Join(dir, "bench.yml")
		_, stderr := tollgateRun(t, ctx, append([]string{"bench", policy, "-r", req, "--settings-json", listSelected, "--count", "50", "--warmup", "0",
			"--duration", "2s", "--record-host-capabilities-interactions", session}, live...)...)
		if !strings.Contains(stderr, "kubernetes cache synced") {
			t.Fatalf("the Namespace cache did not sync:\n%s", stderr)
		}
		// every answer, direct at first, then from the cache, is the same list
		samePayloads(t, session, 50)
	})

	t.Run("bench over the cache cap answers by direct calls", func(t *testing.T) {
		session := filepath.Join(dir, "bench-cap.yml")
		_, stderr := tollgateRun(t, ctx, append([]string{"bench", policy, "-r", req, "--settings-json", listSelected, "--count", "20", "--warmup", "0",
			"--duration", "1s", "--max-cached-objects", "1", "--record-host-capabilities-interactions", session}, live...)...)
		if !strings.Contains(stderr, "more objects than the cache cap") || strings.Contains(stderr, "kubernetes cache synced") {
			t.Fatalf("the Namespace cache did not give up at its cap:\n%s", stderr)
		}
		samePayloads(t, session, 20)
	})
}

// samePayloads checks that a recorded session holds at least n answers, all the same list that
// names cap-labelled and not cap-bare.
func samePayloads(t *testing.T, session string, n int) {
	t.Helper()
	b, err := os.ReadFile(session)
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "payload: "); ok {
			payloads[p]++
		}
	}
	if len(payloads) != 1 {
		t.Fatalf("%d different answers, want 1: %v", len(payloads), payloads)
	}
	for p, got := range payloads {
		if got < n || !strings.Contains(p, "cap-labelled") || strings.Contains(p, "cap-bare") {
			t.Fatalf("%d answers %s", got, p)
		}
	}
}

// tollgateRun runs the tollgate binary and fails the test on a non-zero exit.
func tollgateRun(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, env.bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("tollgate %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// TestCapabilitiesServe: `tollgate serve --kubeconfig` answers admission reviews of a context-aware
// policy from live namespaces, and /metrics shows the capability calls and the cache hits.
func TestCapabilitiesServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.cluster
	for name, labels := range map[string]map[string]string{"srv-labelled": {"cost-center": "cc-2"}, "srv-bare": nil} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	dir := t.TempDir()
	mod := filepath.Join(env.root, "test/testdata/policies/namespace-label/policy.wasm")
	pols := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(pols, []byte("ns-label:\n  module: file://"+mod+"\n  settings: {label: cost-center}\n"+
		"  contextAwareResources: [{apiVersion: v1, kind: Namespace}]\n  hostCapabilities: [kubernetes/get_resource]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, ctx, pols)
	base, probeURL, logs := srv.base, srv.probe, srv.logs
	review := func(ns string) string {
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-` + ns + `","kind":{"group":"","version":"v1","kind":"Pod"},` +
			`"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"` + ns + `","userInfo":{"username":"e2e"},` +
			`"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"` + ns + `"}}}}`
		resp, err := http.Post(base+"/validate/ns-label", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for i := 0; i < 20; i++ {
		if got := review("srv-labelled"); !strings.Contains(got, `"allowed":true`) {
			t.Fatalf("srv-labelled: %s", got)
		}
		if got := review("srv-bare"); !strings.Contains(got, `"allowed":false`) || !strings.Contains(got, "namespace srv-bare has no label cost-center") {
			t.Fatalf("srv-bare: %s", got)
		}
		time.Sleep(50 * time.Millisecond) // the cache syncs meanwhile
	}
	resp, err := http.Get(probeURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tollgate_capability_calls_total{capability="kubernetes/get_resource",outcome="success",policy="ns-label"} 40`,
		`tollgate_capability_cache_requests_total{capability="kubernetes/get_resource",result="hit"}`,
		`tollgate_capability_cache_objects{resource="v1/Namespace"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(logs.String(), "not served by this server yet") {
		t.Error("serve warned that contextAwareResources are not served")
	}
}
