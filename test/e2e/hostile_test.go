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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// TestHostileModulesOnRealNode is issue 30's tenant-to-cluster outage, on the real node: a
// tenant's AdmissionPolicies whose modules (pushed to the cluster's registry) are built to hurt
// the server that loads them (../shared/HOSTILE-MODULES.md: a function declaring 100,000,000
// locals, a `start` function that loops forever, 50,000 nested blocks) are added to a
// PolicyServer that already serves a cluster-wide policy under steady load and a healthy policy
// of the same tenant. Each hostile policy must fail with the reason in its status conditions and
// get no webhook; the other policies keep answering (0 failed requests during the whole test) and
// keep taking edits; the server's container never restarts (it runs with limits.memory 1Gi, as
// a PolicyServer in a real cluster would, so a load that eats memory is an OOM kill, a restart).
func TestHostileModulesOnRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	op := startOperator(t, ctx)
	const server, tenant, loadNS = "hostile", "hostile-tenant", "hostile-load"
	serverObject := "policy-server-" + server
	// reasons are what each policy's status must say (every string, case-insensitive).
	modules := []struct {
		name    string
		wasm    []byte
		reasons []string
	}{
		{"hostile-locals", hostile.Locals(100_000_000), []string{"100000000 locals"}},
		{"hostile-start-loop", hostile.StartLoop(), []string{"start"}},
		{"hostile-nested-blocks", hostile.NestedBlocks(50_000), []string{"nest"}},
	}
	objs := []string{"ClusterAdmissionPolicy/hostile-load-labels", "AdmissionPolicy/" + tenant + "/tenant-labels"}
	for _, m := range modules {
		objs = append(objs, "AdmissionPolicy/"+tenant+"/"+m.name)
	}
	t.Cleanup(func() {
		op.deleteAll(t, append(objs, "PolicyServer/"+server))
		_ = op.cs.CoreV1().Namespaces().Delete(context.Background(), loadNS, metav1.DeleteOptions{})
	})
	for _, ns := range []string{tenant, loadNS} {
		if err := ensureNamespace(ctx, op.cs, ns); err != nil {
			t.Fatal(err)
		}
	}

	// The server and its healthy policies: one cluster-wide (under load), one of the tenant.
	apply(t, ctx, policyServerYAML(server, 1, "  limits:\n    memory: 1Gi\n"))
	if _, err := waitServerPods(ctx, op.cs, controllerNS, serverObject, 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "hostile-load-labels", policySpec{
		module: op.requiredWasm, settings: `{"mandatory_labels": ["k0"]}`, resources: "configmaps", namespace: loadNS, server: server,
	}))
	apply(t, ctx, policyYAML("AdmissionPolicy", tenant, "tenant-labels", policySpec{
		module: op.requiredWasm, settings: `{"mandatory_labels": ["team"]}`, resources: "configmaps", server: server,
	}))
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "hostile-load-labels", "active", 2*time.Minute)
	op.waitStatus(t, ctx, "AdmissionPolicy", tenant, "tenant-labels", "active", 2*time.Minute)
	eventually(t, 30*time.Second, func() error {
		if err := createConfigMap(ctx, op.cs, loadNS, nil); !isDenial(err) {
			return fmt.Errorf("%s, no label: want the policy's denial, got %v", loadNS, err)
		}
		if err := createConfigMap(ctx, op.cs, tenant, nil); !isDenial(err) {
			return fmt.Errorf("%s, no team label: want the tenant policy's denial, got %v", tenant, err)
		}
		return nil
	})
	pods0, err := serverPods(ctx, op.cs, controllerNS, serverObject)
	if err != nil || len(pods0) != 1 {
		t.Fatalf("server pods: %d (%v)", len(pods0), err)
	}
	ids0, restarts0 := containerIDs(pods0)

	// Steady load on the cluster-wide policy for the rest of the test.
	l := startLoad(ctx, op.cs, loadNS, 2, 1_000_000, 12*time.Minute)
	defer l.stop()
	time.Sleep(2 * time.Second)

	// The tenant adds its hostile policies.
	begin := time.Now()
	for _, m := range modules {
		apply(t, ctx, policyYAML("AdmissionPolicy", tenant, m.name, policySpec{
			module: pushModule(t, m.name, m.wasm), resources: "configmaps", server: server,
		}))
	}
	for _, m := range modules {
		var msgs string
		eventually(t, 4*time.Minute, func() error {
			obj := op.get(t, ctx, "AdmissionPolicy", tenant, m.name)
			st, _, _ := unstructured.NestedString(obj.Object, "status", "policyStatus")
			msgs = conditionMessages(obj)
			if st == "active" {
				return fmt.Errorf("%s is active: %s", m.name, msgs)
			}
			active := activeCondition(obj)
			if active == nil || active["status"] != "False" || active["reason"] != "PolicyLoadFailed" {
				return fmt.Errorf("%s: policyStatus %q, PolicyActive %v: want False, PolicyLoadFailed, with the reason", m.name, st, active)
			}
			msg := strings.ToLower(fmt.Sprint(active["message"]))
			for _, r := range m.reasons {
				if !strings.Contains(msg, strings.ToLower(r)) {
					return fmt.Errorf("%s: policyStatus %q, PolicyActive message %q: want it to say %q", m.name, st, active["message"], r)
				}
			}
			return nil
		})
		line := fmt.Sprintf("e2e: hostile module %s failed %v after the policies were applied: %s", m.name, time.Since(begin).Round(100*time.Millisecond), msgs)
		t.Log(line)
		fmt.Println(line)
		if _, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "namespaced-"+tenant+"-"+m.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: webhook configuration registered (get: %v)", m.name, err)
		}
	}

	// The other policies of the server keep answering and keep taking edits (a load that never
	// ends would hold every later reload).
	t0 := time.Now()
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "hostile-load-labels", `{"settings": {"mandatory_labels": ["k1"]}}`)
	if _, err := l.probe(ctx, "k1", 2*time.Minute); err != nil {
		t.Errorf("an edit of a healthy policy beside the hostile ones: %v", err)
	} else {
		t.Logf("edit of the healthy policy in force %v after it was applied", time.Since(t0).Round(time.Millisecond))
	}
	if err := createConfigMap(ctx, op.cs, tenant, nil); !isDenial(err) {
		t.Errorf("the tenant's healthy policy: want its denial, got %v", err)
	}
	if err := createConfigMap(ctx, op.cs, tenant, map[string]string{"team": "t"}); err != nil {
		t.Errorf("the tenant's compliant ConfigMap (the hostile policies have no webhook): %v", err)
	}
	time.Sleep(5 * time.Second)
	l.stop()

	pods1, err := serverPods(ctx, op.cs, controllerNS, serverObject)
	if err != nil {
		t.Fatal(err)
	}
	ids1, restarts1 := containerIDs(pods1)
	var peak int64
	if len(pods1) == 1 {
		peak = podPeakMemory(string(pods1[0].UID))
	}
	line := fmt.Sprintf("e2e: hostile modules beside a policy under load: %d requests, %d failed; server restarts %d; pod peak memory %d MiB; %v",
		l.total.Load(), l.failed.Load(), restarts1, peak>>20, time.Since(begin).Round(time.Second))
	t.Log(line)
	fmt.Println(line)
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d failed requests; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
	}
	if l.denied.Load() == 0 {
		t.Errorf("no request was denied under load (%d requests): the load tested nothing", l.total.Load())
	}
	if fmt.Sprint(ids1) != fmt.Sprint(ids0) || restarts1 != restarts0 || restarts1 != 0 {
		t.Errorf("the policy server's container changed (want the same one, never restarted): %v (restarts %d) -> %v (restarts %d)%s",
			ids0, restarts0, ids1, restarts1, podsState(ctx, op.cs, controllerNS, &metav1.LabelSelector{MatchLabels: pods0[0].Labels}))
	}
	if n, detail, err := tollgateRestarts(ctx, op.cs, controllerNS); err != nil || n != 0 {
		t.Errorf("tollgate containers restarted: %d %s (%v)", n, detail, err)
	}
}

// activeCondition is the policy's PolicyActive condition, nil if it has none.
func activeCondition(obj *unstructured.Unstructured) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m != nil && m["type"] == "PolicyActive" {
			return m
		}
	}
	return nil
}

// pushModule pushes wasm to the cluster's registry as /e2e/hostile/<name>:v1 with `tollgate
// push --force` (the module has no metadata) and returns the URI a policy server pod fetches it
// from.
func pushModule(t *testing.T, name string, wasm []byte) string {
	t.Helper()
	dir := t.TempDir()
	file, sources := filepath.Join(dir, name+".wasm"), filepath.Join(dir, "sources.yml")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sources, []byte("insecure_sources: [\""+cluster.RegistryHost+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := "/e2e/hostile/" + name + ":v1"
	if out, err := exec.Command(env.bin, "push", "--force", "--sources-path", sources, file, "registry://"+cluster.RegistryHost+repo).CombinedOutput(); err != nil {
		t.Fatalf("tollgate push %s: %v: %s", name, err, out)
	}
	return "registry://" + cluster.PodRegistryHost + repo
}
