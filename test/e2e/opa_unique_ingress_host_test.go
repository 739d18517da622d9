package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOPAUniqueIngressHost runs the context-aware Rego example examples/opa-unique-ingress-host
// (executionMode opa; the module never calls the host: tollgate lists every Ingress before the
// evaluation and hands them over as data.kubernetes.ingresses) against live Ingresses of the real
// kube-apiserver: `tollgate run --allow-context-aware --kubeconfig` decides by the Ingresses the
// test creates and deletes, its recordings hold what kwctl records (a KubernetesListResourceAll,
// then a KubernetesGetResourcePluralName) and replay without the cluster (the committed sessions
// in the example's testdata are recordings of this test: E2E_UPDATE_SESSIONS=1 rewrites them), and
// `tollgate serve` follows the cluster through its Ingress cache. Its namespaces and hosts are its
// own (opa-*, example.org): namespaces never go away here (no controller-manager), and other tests
// list Ingresses too.
func TestOPAUniqueIngressHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.cluster
	example := filepath.Join(env.root, "examples/opa-unique-ingress-host")
	policy := filepath.Join(example, "policy.wasm")
	if _, err := os.Stat(policy); err != nil {
		t.Fatalf("%v: run make policies", err)
	}
	ing := newIngresses(t, ctx, "opa-shop", "opa-team-b", "opa-team-c")
	ing.create("opa-team-b", "storefront", "shop.example.org")
	ing.create("opa-team-c", "blog", "blog.example.org")

	// The request: a CREATE of opa-shop/web for shop.example.org and api.example.org.
	req := filepath.Join(example, "testdata/ingress-web.json")
	dir := t.TempDir()
	live := []string{"--allow-context-aware", "--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(env.dir, "wasm-cache")}
	run := func(args ...string) verdict {
		t.Helper()
		return runVerdict(t, ctx, append([]string{policy, "-r", req}, args...)...)
	}
	conflict := `Ingress opa-shop/web: host "shop.example.org" is already used by Ingress opa-team-b/storefront`

	// Without --allow-context-aware the policy gets no cluster data (as with kwctl): nothing conflicts.
	if v := run("--kubeconfig", c.Kubeconfig); !v.Allowed {
		t.Fatalf("without --allow-context-aware: %+v, want allowed (no data.kubernetes)", v)
	}

	// Live, recording; then the recordings replay without the cluster.
	sessions := map[string]string{}
	record := func(name string) verdict {
		t.Helper()
		sessions[name] = filepath.Join(dir, name)
		return run(append([]string{"--record-host-capabilities-interactions", sessions[name]}, live...)...)
	}
	if v := record("session-conflict.yml"); v.Allowed || v.Status.Message != conflict || v.Status.Code != 409 {
		t.Fatalf("with opa-team-b/storefront on shop.example.org: %+v, want a 409 rejection %q", v, conflict)
	}
	// opa-shop/web itself now exists (its UPDATE is no conflict with itself), and the other owner goes.
	ing.create("opa-shop", "web", "shop.example.org", "api.example.org")
	ing.delete("opa-team-b", "storefront")
	if v := record("session-free.yml"); !v.Allowed {
		t.Fatalf("with shop.example.org free: %+v, want allowed", v)
	}
	// The same cluster, with another namespace now on api.example.org.
	ing.create("opa-team-c", "api", "api.example.org")
	if v := run(live...); v.Allowed || v.Status.Message != `Ingress opa-shop/web: host "api.example.org" is already used by Ingress opa-team-c/api` {
		t.Fatalf("with opa-team-c/api on api.example.org: %+v", v)
	}

	for name, want := range map[string]verdict{"session-conflict.yml": {}, "session-free.yml": {Allowed: true}} {
		v := run("--allow-context-aware", "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"), "--replay-host-capabilities-interactions", sessions[name])
		if v.Allowed != want.Allowed || (!v.Allowed && v.Status.Message != conflict) {
			t.Errorf("replaying %s: %+v, want allowed=%v", name, v, want.Allowed)
		}
		b, err := os.ReadFile(sessions[name])
		if err != nil {
			t.Fatal(err)
		}
		// What kwctl records for an opa policy: the list of the declared kind with Kubewarden's
		// fields, then its plural name.
		s := string(b)
		list := strings.Index(s, "!KubernetesListResourceAll\n    api_version: networking.k8s.io/v1\n    kind: Ingress\n    label_selector: null\n    field_selector: null\n    disable_cache: false\n    field_masks: null\n")
		plural := strings.Index(s, "!KubernetesGetResourcePluralName\n    api_version: networking.k8s.io/v1\n    kind: Ingress\n")
		if list < 0 || plural < list || strings.Count(s, "- type: Exchange") != 2 || !strings.Contains(s, `payload: '"ingresses"'`) {
			t.Errorf("%s does not hold one list of Ingresses then their plural name:\n%s", name, s)
		}
		if os.Getenv("E2E_UPDATE_SESSIONS") != "" {
			if err := os.WriteFile(filepath.Join(example, "testdata", name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("serve follows the cluster", func(t *testing.T) {
		ing.delete("opa-team-c", "api")
		pols := filepath.Join(dir, "policies.yml")
		if err := os.WriteFile(pols, []byte("opa-unique-ingress-host:\n  module: file://"+policy+"\n"+
			"  contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		srv := startServe(t, ctx, pols)
		base := srv.base
		admissionRequest, err := os.ReadFile(req)
		if err != nil {
			t.Fatal(err)
		}
		review := func() verdict {
			body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + string(admissionRequest) + `}`
			resp, err := http.Post(base+"/validate/opa-unique-ingress-host", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var r struct{ Response verdict }
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			return r.Response
		}
		if v := review(); !v.Allowed {
			t.Fatalf("no other Ingress on the hosts: %+v", v)
		}
		// Once the cache has synced the data is kept between reviews and rebuilt when an
		// Ingress changes: the decisions follow the cluster.
		ing.create("opa-team-b", "storefront", "shop.example.org")
		eventually(t, 30*time.Second, func() error {
			if v := review(); v.Allowed || v.Status.Message != conflict || v.Status.Code != 409 {
				return fmt.Errorf("after creating opa-team-b/storefront: %+v", v)
			}
			return nil
		})
		ing.delete("opa-team-b", "storefront")
		eventually(t, 30*time.Second, func() error {
			if v := review(); !v.Allowed {
				return fmt.Errorf("after deleting opa-team-b/storefront: %+v", v)
			}
			return nil
		})
		// Many reviews of an unchanged cluster are answered from the kept data: no list is made
		// (the policy's list_resources_all count in /metrics does not move).
		lists := func() string {
			t.Helper()
			resp, err := http.Get(srv.probe + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			const series = `tollgate_capability_calls_total{capability="kubernetes/list_resources_all",outcome="success",policy="opa-unique-ingress-host"} `
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, series); ok {
					return v
				}
			}
			t.Fatalf("no list_resources_all calls of the policy in /metrics")
			return ""
		}
		// Until the Ingress cache has synced, lists go to the apiserver and the data is rebuilt
		// each time; then it stops.
		eventually(t, 30*time.Second, func() error {
			before := lists()
			for range 3 {
				review()
			}
			if after := lists(); after != before {
				return fmt.Errorf("3 reviews made %s lists after %s: the cache has not synced yet", after, before)
			}
			return nil
		})
		before := lists()
		for range 20 {
			if v := review(); !v.Allowed {
				t.Fatalf("unchanged cluster: %+v", v)
			}
		}
		if after := lists(); after != before {
			t.Errorf("20 reviews of an unchanged cluster listed the Ingresses again: %s lists before, %s after", before, after)
		}
	})
}
