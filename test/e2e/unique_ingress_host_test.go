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

// TestUniqueIngressHost runs the example context-aware policy examples/unique-ingress-host
// (TinyGo, written with sdk/capabilities) against live Ingresses of the real kube-apiserver:
// `tollgate run --allow-context-aware --kubeconfig` decides by the Ingresses the test creates
// and deletes, records kwctl sessions that then replay without the cluster (the committed
// sessions in the example's testdata are recordings of this test: E2E_UPDATE_SESSIONS=1 rewrites
// them), and `tollgate serve` answers AdmissionReviews from its Ingress cache as it follows the
// cluster.
func TestUniqueIngressHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.cluster
	example := filepath.Join(env.root, "examples/unique-ingress-host")
	policy := filepath.Join(example, "policy.wasm")
	if _, err := os.Stat(policy); err != nil {
		t.Fatalf("%v: run make policies", err)
	}
	ing := newIngresses(t, ctx, "shop", "team-b", "team-c")
	ing.create("team-b", "storefront", "shop.example.com")
	ing.create("team-c", "blog", "blog.example.com")

	// The request: a CREATE of shop/web for shop.example.com and api.example.com.
	req := filepath.Join(example, "testdata/ingress-shop-web.json")
	dir := t.TempDir()
	live := []string{"--allow-context-aware", "--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(env.dir, "wasm-cache")}
	run := func(args ...string) verdict {
		t.Helper()
		return runVerdict(t, ctx, append([]string{policy, "-r", req}, args...)...)
	}
	conflict := `Ingress shop/web: host "shop.example.com" is already used by Ingress team-b/storefront`

	// Live, recording; then the recording replays without the cluster.
	sessions := map[string]string{}
	record := func(name string) verdict {
		t.Helper()
		sessions[name] = filepath.Join(dir, name)
		return run(append([]string{"--record-host-capabilities-interactions", sessions[name]}, live...)...)
	}
	if v := record("session-conflict.yml"); v.Allowed || v.Status.Message != conflict || v.Status.Code != 409 {
		t.Fatalf("with team-b/storefront on shop.example.com: %+v, want a 409 rejection %q", v, conflict)
	}
	// shop/web itself now exists (its UPDATE is no conflict with itself), and the other owner goes.
	ing.create("shop", "web", "shop.example.com", "api.example.com")
	ing.delete("team-b", "storefront")
	if v := record("session-free.yml"); !v.Allowed {
		t.Fatalf("with shop.example.com free: %+v, want allowed", v)
	}
	// The same cluster, with another namespace now on api.example.com.
	ing.create("team-c", "api", "api.example.com")
	if v := run(live...); v.Allowed || !strings.Contains(v.Status.Message, `host "api.example.com" is already used by Ingress team-c/api`) {
		t.Fatalf("with team-c/api on api.example.com: %+v", v)
	}

	for name, wantAllowed := range map[string]bool{"session-conflict.yml": false, "session-free.yml": true} {
		v := run("--allow-context-aware", "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig"), "--replay-host-capabilities-interactions", sessions[name])
		if v.Allowed != wantAllowed {
			t.Errorf("replaying %s: %+v, want allowed=%v", name, v, wantAllowed)
		}
		b, err := os.ReadFile(sessions[name])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "!KubernetesListResourceAll") || !strings.Contains(string(b), "spec.rules.host") {
			t.Errorf("%s does not record the list of Ingresses:\n%s", name, b)
		}
		if os.Getenv("E2E_UPDATE_SESSIONS") != "" {
			if err := os.WriteFile(filepath.Join(example, "testdata", name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("serve follows the cluster", func(t *testing.T) {
		ing.delete("team-c", "api")
		pols := filepath.Join(dir, "policies.yml")
		if err := os.WriteFile(pols, []byte("unique-ingress-host:\n  module: file://"+policy+"\n"+
			"  contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]\n  hostCapabilities: [kubernetes/list_resources_all]\n"), 0o644); err != nil {
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
			resp, err := http.Post(base+"/validate/unique-ingress-host", "application/json", strings.NewReader(body))
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
		// Live objects change the decision as the server's Ingress cache follows them.
		ing.create("team-b", "storefront", "shop.example.com")
		eventually(t, 30*time.Second, func() error {
			if v := review(); v.Allowed || v.Status.Message != conflict {
				return fmt.Errorf("after creating team-b/storefront: %+v", v)
			}
			return nil
		})
		ing.delete("team-b", "storefront")
		eventually(t, 30*time.Second, func() error {
			if v := review(); !v.Allowed {
				return fmt.Errorf("after deleting team-b/storefront: %+v", v)
			}
			return nil
		})
	})
}
