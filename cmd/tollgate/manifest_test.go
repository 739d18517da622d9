package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunPolicyManifest: run takes a ClusterAdmissionPolicy manifest as kwctl does: its
// spec.module with its spec.settings, unless settings flags are given.
func TestRunPolicyManifest(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	pod := ex("required-labels/testdata/pod-no-labels.json")
	manifest := func(kind, apiVersion, module, extra string) string {
		return "apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata: {name: labels}\nspec:\n  module: " + module + "\n" + extra
	}
	mod := ex("required-labels/policy.wasm")
	withTeam := "  settings:\n    mandatory_labels: [team]\n"

	out, err := tollgate(t, "", "run", write("cap.yaml", manifest("ClusterAdmissionPolicy", "policies.kubewarden.io/v1", mod, withTeam)), "-r", pod)
	if err != nil || !strings.Contains(out, `"allowed":false`) || !strings.Contains(out, "team") {
		t.Fatalf("spec.settings not used: %s %v", out, err)
	}
	out, err = tollgate(t, "", "run", write("ap.yml", manifest("AdmissionPolicy", "policies.tollgate.dev/v1", mod, withTeam)), "-r", pod,
		"--settings-json", `{"mandatory_labels":["owner"]}`)
	if err != nil || !strings.Contains(out, `"allowed":false`) || !strings.Contains(out, "owner") || strings.Contains(out, "team") {
		t.Fatalf("--settings-json does not win over spec.settings: %s %v", out, err)
	}

	for _, tt := range []struct {
		name, content string
		want          []string
	}{
		{"not a policy", "apiVersion: v1\nkind: ConfigMap\n", []string{"bad.yaml", `apiVersion "v1"`, "policies.kubewarden.io/v1"}},
		{"group", manifest("ClusterAdmissionPolicyGroup", "policies.kubewarden.io/v1", mod, ""), []string{"bad.yaml", "policy group cannot be run"}},
		{"unknown kind", manifest("PolicyServer", "policies.kubewarden.io/v1", mod, ""), []string{"bad.yaml", `kind "PolicyServer"`}},
		{"no module", manifest("ClusterAdmissionPolicy", "policies.kubewarden.io/v1", `""`, ""), []string{"bad.yaml", "spec.module is empty"}},
		{"module missing", manifest("ClusterAdmissionPolicy", "policies.kubewarden.io/v1", filepath.Join(dir, "nope.wasm"), ""), []string{"bad.yaml", "spec.module", "nope.wasm"}},
		{"resource without kind", manifest("ClusterAdmissionPolicy", "policies.kubewarden.io/v1", mod, "  contextAwareResources: [{apiVersion: v1}]\n"),
			[]string{"bad.yaml", "spec.contextAwareResources[0]", "kind"}},
		{"settings not an object", manifest("ClusterAdmissionPolicy", "policies.kubewarden.io/v1", mod, "  settings: [1]\n"), []string{"bad.yaml", "spec.settings"}},
		{"not yaml", "a: [", []string{"bad.yaml"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tollgate(t, "", "run", write("bad.yaml", tt.content), "-r", pod)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
