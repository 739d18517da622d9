package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

func scaffold(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newScaffoldCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

const scaffoldDir = "testdata/scaffold-map"

func TestScaffoldMAPPoliciesYML(t *testing.T) {
	out, err := scaffold(t, "map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "--params", filepath.Join(scaffoldDir, "params.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]struct {
		Module          string         `json:"module"`
		AllowedToMutate bool           `json:"allowedToMutate"`
		Settings        map[string]any `json:"settings"`
	}
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	e, ok := got["sidecar-policy-example-com"]
	if !ok || len(got) != 1 {
		t.Fatalf("want one entry sidecar-policy-example-com, got\n%s", out)
	}
	if e.Module != "builtin://mutating-admission-policy" || !e.AllowedToMutate {
		t.Fatalf("entry %+v", e)
	}
	pol := e.Settings["policy"].(map[string]any)
	if pol["apiVersion"] != "admissionregistration.k8s.io/v1beta1" || pol["kind"] != "MutatingAdmissionPolicy" {
		t.Fatalf("policy %v", pol)
	}
	if _, ok := pol["metadata"].(map[string]any)["resourceVersion"]; ok {
		t.Fatal("resourceVersion kept")
	}
	expr := pol["spec"].(map[string]any)["mutations"].([]any)[0].(map[string]any)["jsonPatch"].(map[string]any)["expression"].(string)
	if !strings.Contains(expr, "params.data.image") {
		t.Fatalf("expression %q", expr)
	}
	if b := e.Settings["binding"].(map[string]any); b["kind"] != "MutatingAdmissionPolicyBinding" {
		t.Fatalf("binding %v", b)
	}
	params := e.Settings["params"].([]any)
	if len(params) != 1 || params[0].(map[string]any)["kind"] != "ConfigMap" {
		t.Fatalf("params %v", params)
	}
}

func TestScaffoldMAPClusterAdmissionPolicy(t *testing.T) {
	out, err := scaffold(t, "map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "-o", "clusteradmissionpolicy")
	if err != nil {
		t.Fatal(err)
	}
	var cap struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Module        string           `json:"module"`
			Mutating      bool             `json:"mutating"`
			FailurePolicy string           `json:"failurePolicy"`
			Rules         []map[string]any `json:"rules"`
			Settings      map[string]any   `json:"settings"`
		}
	}
	if err := yaml.Unmarshal([]byte(out), &cap); err != nil {
		t.Fatal(err)
	}
	if cap.APIVersion != "policies.kubewarden.io/v1" || cap.Kind != "ClusterAdmissionPolicy" || cap.Metadata.Name != "sidecar-policy-example-com" {
		t.Fatalf("header %+v", cap)
	}
	if !cap.Spec.Mutating || cap.Spec.FailurePolicy != "Ignore" || len(cap.Spec.Rules) != 1 || cap.Spec.Rules[0]["resources"].([]any)[0] != "pods" {
		t.Fatalf("spec %+v", cap.Spec)
	}
	if _, ok := cap.Spec.Settings["params"]; ok {
		t.Fatal("params without --params")
	}
}

func TestScaffoldMAPRBAC(t *testing.T) {
	out, err := scaffold(t, "map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "-o", "settings",
		"--rbac", filepath.Join(scaffoldDir, "rbac.yaml"), "--rbac", filepath.Join(scaffoldDir, "roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var settings struct {
		RBAC map[string][]struct {
			APIVersion string         `json:"apiVersion"`
			Kind       string         `json:"kind"`
			Metadata   map[string]any `json:"metadata"`
		} `json:"rbac"`
	}
	if err := yaml.Unmarshal([]byte(out), &settings); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := map[string][]string{ // list -> kind/name of its objects, in file order
		"clusterRoles":        {"ClusterRole/sidecar-injector"},
		"clusterRoleBindings": {"ClusterRoleBinding/mesh-admins"},
		"roleBindings":        {"RoleBinding/ci"},
		"roles":               {"Role/reader"},
	}
	if len(settings.RBAC) != len(want) {
		t.Fatalf("rbac lists %v, want %v\n%s", settings.RBAC, want, out)
	}
	for list, objs := range want {
		got := settings.RBAC[list]
		if len(got) != len(objs) {
			t.Fatalf("%s: %d objects, want %v", list, len(got), objs)
		}
		for i, o := range objs {
			if g := got[i].Kind + "/" + got[i].Metadata["name"].(string); g != o || got[i].APIVersion != "rbac.authorization.k8s.io/v1" {
				t.Errorf("%s[%d] = %s %s, want %s", list, i, got[i].APIVersion, g, o)
			}
			if _, ok := got[i].Metadata["resourceVersion"]; ok {
				t.Errorf("%s[%d]: resourceVersion kept", list, i)
			}
		}
	}
}

func TestScaffoldMAPErrors(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no policy flag", []string{"map"}, `required flag(s) "policy" not set`},
		{"missing file", []string{"map", "-p", filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"wrong kind", []string{"map", "-p", write("vap.yaml", "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: x}\nspec: {}\n")}, `kind "ValidatingAdmissionPolicy"`},
		{"binding only", []string{"map", "-p", write("b.yaml", "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec: {policyName: x}\n")}, "no MutatingAdmissionPolicy"},
		{"binding for another policy", []string{"map", "-p", write("p.yaml", "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\nmetadata: {name: p}\nspec: {}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec: {policyName: q}\n")}, `binds policy "q", not "p"`},
		{"bad output", []string{"map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "-o", "json"}, "unknown output format"},
		{"rbac: not an RBAC kind", []string{"map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "--rbac", filepath.Join(scaffoldDir, "params.yaml")}, `params.yaml: document 1: items[0]: kind "ConfigMap" apiVersion "v1" is not a Role, ClusterRole, RoleBinding or ClusterRoleBinding of rbac.authorization.k8s.io/v1`},
		{"rbac: old version in a list", []string{"map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "--rbac", write("old.yaml", "kind: List\napiVersion: v1\nitems:\n- {apiVersion: rbac.authorization.k8s.io/v1beta1, kind: Role, metadata: {name: r}}\n")}, `old.yaml: document 1: items[0]: kind "Role" apiVersion "rbac.authorization.k8s.io/v1beta1" is not`},
		{"binding twice", []string{"map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "-b", filepath.Join(scaffoldDir, "policy.yaml")}, "already holds a binding"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := scaffold(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestScaffoldMAPSettings(t *testing.T) {
	out, err := scaffold(t, "map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "-o", "settings")
	if err != nil {
		t.Fatal(err)
	}
	var settings map[string]map[string]any
	if err := yaml.Unmarshal([]byte(out), &settings); err != nil {
		t.Fatal(err)
	}
	if settings["policy"]["kind"] != "MutatingAdmissionPolicy" || settings["binding"]["kind"] != "MutatingAdmissionPolicyBinding" || len(settings) != 2 {
		t.Fatalf("settings\n%s", out)
	}
}

// TestRunBuiltinMAP runs the documented sidecar example through the
// embedded module, with the settings of the docs and with settings made by
// scaffold from MAP YAML (it needs `make policies` before the build, like the
// binary: the module is embedded).
func TestRunBuiltinMAP(t *testing.T) {
	testdata := testfixture.Path("policies/mutating-admission-policy/testdata")
	patchOf := func(out string) string {
		t.Helper()
		var resp struct {
			Allowed bool   `json:"allowed"`
			Patch   string `json:"patch"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil || !resp.Allowed {
			t.Fatalf("response %q: %v", out, err)
		}
		p, err := base64.StdEncoding.DecodeString(resp.Patch)
		if err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	out, err := tollgate(t, "", "run", "builtin://mutating-admission-policy", "-r", filepath.Join(testdata, "pod.json"), "-s", filepath.Join(testdata, "sidecar-settings.yml"), "--timeout", "20s")
	if err != nil {
		t.Fatal(err)
	}
	if p := patchOf(out); !strings.Contains(p, `"op":"add","path":"/spec/initContainers/1"`) || !strings.Contains(p, `"image":"mesh/proxy:v1.0.0"`) {
		t.Fatalf("patch %s", p)
	}
	out, err = tollgate(t, "", "run", "builtin://mutating-admission-policy", "-r", filepath.Join(testdata, "pod-with-sidecar.json"), "-s", filepath.Join(testdata, "sidecar-settings.yml"), "--timeout", "20s")
	if err != nil || patchOf(out) != "" {
		t.Fatalf("already injected: %q %v", out, err)
	}

	// scaffold -o settings from MAP YAML (policy with paramKind ConfigMap, binding, params).
	settings, err := scaffold(t, "map", "-p", filepath.Join(scaffoldDir, "policy.yaml"), "--params", filepath.Join(scaffoldDir, "params.yaml"), "-o", "settings")
	if err != nil {
		t.Fatal(err)
	}
	sf := filepath.Join(t.TempDir(), "settings.yml")
	if err := os.WriteFile(sf, []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = tollgate(t, "", "run", "builtin://mutating-admission-policy", "-r", filepath.Join(testdata, "pod.json"), "-s", sf, "--timeout", "20s")
	if err != nil {
		t.Fatal(err)
	}
	if p := patchOf(out); !strings.Contains(p, `"image":"mesh/proxy:v1.0.0"`) {
		t.Fatalf("patch %s", p)
	}
}

// TestRunBuiltinMAPAuthorizer runs the documented authorizer example through
// the embedded module: the sidecar is injected unless the requester may
// bypass the mesh (RBAC from settings.rbac).
func TestRunBuiltinMAPAuthorizer(t *testing.T) {
	testdata := testfixture.Path("policies/mutating-admission-policy/testdata")
	settings := filepath.Join(testdata, "authz-settings.yml")
	for _, c := range []struct {
		request string
		patched bool
	}{
		{"pod-by-developer.json", true},
		{"pod-by-mesh-operator.json", false},
	} {
		out, err := tollgate(t, "", "run", "builtin://mutating-admission-policy", "-r", filepath.Join(testdata, c.request), "-s", settings, "--timeout", "20s")
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Allowed bool   `json:"allowed"`
			Patch   string `json:"patch"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil || !resp.Allowed {
			t.Fatalf("%s: response %q: %v", c.request, out, err)
		}
		p, _ := base64.StdEncoding.DecodeString(resp.Patch)
		if got := strings.Contains(string(p), `"name":"mesh-proxy"`); got != c.patched {
			t.Errorf("%s: patched %v, want %v: %s", c.request, got, c.patched, p)
		}
	}
}
