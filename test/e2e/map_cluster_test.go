package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMAPFromCluster runs the built-in MutatingAdmissionPolicy with fromCluster settings
// (policies/mutating-admission-policy/testdata/cluster-settings.yml) through
// `tollgate run CAP.yaml --allow-context-aware --kubeconfig` on the real kube-apiserver: the
// namespace's labels (namespaceSelector, namespaceObject), the ConfigMap parameter (paramKind)
// and the requester's RBAC (the CEL authorizer, through SubjectAccessReview) are live objects
// created here, and changing them changes the decision. A recorded session replays the same
// decision without the cluster.
func TestMAPFromCluster(t *testing.T) {
	// The first run compiles the 66 MB module (about 10 s on an idle machine, minutes on a
	// loaded one); the others load it from the compilation cache.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cs := env.cluster.Client
	const ns = "mesh-apps"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"mesh": "enabled", "team": "payments"}}}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mesh-config"},
		Data: map[string]string{"image": "mesh/proxy:1.2"}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "mesh-bypass"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"mesh.example.com"}, Resources: []string{"sidecars"}, Verbs: []string{"bypass"}}}}, metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mesh-operators-bypass"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "mesh-bypass"},
		Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "mesh-operators"}}}, metav1.CreateOptions{})
	must(err)

	dir := t.TempDir()
	settings, err := os.ReadFile(filepath.Join(env.root, "policies/mutating-admission-policy/testdata/cluster-settings.yml"))
	must(err)
	var indented []string
	for _, l := range strings.Split(strings.TrimRight(string(settings), "\n"), "\n") {
		indented = append(indented, "    "+l)
	}
	capPath := filepath.Join(dir, "cap.yaml")
	must(os.WriteFile(capPath, []byte(`apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: mesh-sidecar}
spec:
  module: builtin://mutating-admission-policy
  mutating: true
  rules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE]}]
  contextAwareResources:
  - {apiVersion: v1, kind: Namespace}
  - {apiVersion: v1, kind: ConfigMap}
  settings:
`+strings.Join(indented, "\n")+"\n"), 0o644))

	review := func(user, group string) string {
		p := filepath.Join(dir, user+".json")
		must(os.WriteFile(p, []byte(`{"uid":"u-`+user+`","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},`+
			`"name":"app","namespace":"`+ns+`","operation":"CREATE","userInfo":{"username":"`+user+`","groups":["`+group+`","system:authenticated"]},`+
			`"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"app","namespace":"`+ns+`"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}}`), 0o644))
		return p
	}
	dev, operator := review("dev", "developers"), review("olga", "mesh-operators")
	cache := filepath.Join(env.dir, "wasm-cache")
	live := []string{"--allow-context-aware", "--kubeconfig", env.cluster.Kubeconfig, "--cache-dir", cache}
	type response struct {
		Allowed bool   `json:"allowed"`
		Patch   []byte `json:"patch"`
		Status  struct {
			Message string `json:"message"`
		} `json:"status"`
	}
	run := func(args ...string) (response, string) {
		t.Helper()
		out, _ := tollgateRun(t, ctx, append([]string{"run", capPath}, args...)...)
		var r response
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return r, out
	}

	t.Run("sidecar from the live param, team from the live namespace", func(t *testing.T) {
		r, out := run(append([]string{"-r", dev}, live...)...)
		patch := string(r.Patch)
		if !r.Allowed || !strings.Contains(patch, `"image":"mesh/proxy:1.2"`) || !strings.Contains(patch, `"team":"payments"`) {
			t.Fatalf("want the sidecar and the team label: %s\npatch %s", out, patch)
		}
	})
	t.Run("the live RoleBinding lets mesh operators bypass", func(t *testing.T) {
		if r, out := run(append([]string{"-r", operator}, live...)...); !r.Allowed || r.Patch != nil {
			t.Fatalf("want unchanged: %s", out)
		}
	})
	t.Run("record, then replay without the cluster", func(t *testing.T) {
		session := filepath.Join(dir, "session.yml")
		recorded, _ := run(append([]string{"-r", dev, "--record-host-capabilities-interactions", session}, live...)...)
		b, err := os.ReadFile(session)
		must(err)
		for _, tag := range []string{"!KubernetesGetResource", "!KubernetesCanI"} {
			if !strings.Contains(string(b), tag) {
				t.Errorf("session lacks %s:\n%s", tag, b)
			}
		}
		replayed, out := run("-r", dev, "--allow-context-aware", "--replay-host-capabilities-interactions", session, "--cache-dir", cache)
		if base64.StdEncoding.EncodeToString(replayed.Patch) != base64.StdEncoding.EncodeToString(recorded.Patch) || recorded.Patch == nil {
			t.Fatalf("replayed %s\nrecorded patch %s", out, recorded.Patch)
		}
	})
	t.Run("the param deleted: Deny", func(t *testing.T) {
		must(cs.CoreV1().ConfigMaps(ns).Delete(ctx, "mesh-config", metav1.DeleteOptions{}))
		r, out := run(append([]string{"-r", dev}, live...)...)
		if r.Allowed || !strings.Contains(r.Status.Message, "no params found for policy binding with `Deny` parameterNotFoundAction") {
			t.Fatalf("want a denial for the missing param: %s", out)
		}
	})
	t.Run("the namespace label removed: not selected", func(t *testing.T) {
		nsObj, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		must(err)
		delete(nsObj.Labels, "mesh")
		_, err = cs.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{})
		must(err)
		if r, out := run(append([]string{"-r", dev}, live...)...); !r.Allowed || r.Patch != nil {
			t.Fatalf("want unchanged: %s", out)
		}
	})
	t.Run("an AdmissionPolicy may read nothing", func(t *testing.T) {
		// The same policy as an AdmissionPolicy may read nothing of the cluster.
		ap := filepath.Join(dir, "ap.yaml")
		b, err := os.ReadFile(capPath)
		must(err)
		must(os.WriteFile(ap, []byte(strings.Replace(string(b), "kind: ClusterAdmissionPolicy\nmetadata: {name: mesh-sidecar}", "kind: AdmissionPolicy\nmetadata: {name: mesh-sidecar, namespace: "+ns+"}", 1)), 0o644))
		out, _ := tollgateRun(t, ctx, append([]string{"run", ap, "-r", dev}, live...)...)
		if !strings.Contains(out, "Policy has not been granted access to Kubernetes v1/Namespace resources") {
			t.Fatalf("want the undeclared-kind denial: %s", out)
		}
	})
}
