package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// ociRoot is a root command with the registry commands, as root.go registers them.
func ociRoot() *cobra.Command {
	root := &cobra.Command{Use: "tollgate", SilenceUsage: true, SilenceErrors: true}
	addOCIPersistentFlags(root)
	root.AddCommand(newPushCmd(), newPullCmd(), newPoliciesCmd(), newRmCmd(), newDigestCmd(), newSaveCmd(), newLoadCmd(), newInspectCmd())
	return root
}

func execute(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := ociRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func mustExecute(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := execute(t, args...)
	if err != nil {
		t.Fatalf("tollgate %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func TestOCICommands(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	common := []string{"--store-path", store, "--sources-path", reg.SourcesPath, "--docker-config-json-path", reg.DockerConfigPath}
	wasm := ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": "cli-policy"}, 2048)
	file := filepath.Join(dir, "policy.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	uri := reg.URI("cli/policy:v1")

	digest := strings.TrimSpace(mustExecute(t, append([]string{"push", file, uri}, common...)...))
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 {
		t.Fatalf("push printed %q, want a digest", digest)
	}
	var pushed map[string]string
	if err := json.Unmarshal([]byte(mustExecute(t, append([]string{"push", file, uri, "-o", "json"}, common...)...)), &pushed); err != nil ||
		pushed["digest"] != digest || pushed["pinned"] != uri+"@"+digest {
		t.Fatalf("push -o json: %v %v", pushed, err)
	}

	plain := filepath.Join(dir, "plain.wasm")
	_ = os.WriteFile(plain, ocitest.Wasm(nil, 0), 0o644)
	if _, _, err := execute(t, append([]string{"push", plain, reg.URI("cli/plain:v1")}, common...)...); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("push of an unannotated module: %v", err)
	}
	mustExecute(t, append([]string{"push", "--force", plain, reg.URI("cli/plain:v1")}, common...)...)

	if got := mustExecute(t, append([]string{"digest", uri}, common...)...); strings.TrimSpace(got) != uri+"@"+digest {
		t.Fatalf("digest printed %q", got)
	}

	pulled := filepath.Join(dir, "pulled.wasm")
	out := mustExecute(t, append([]string{"pull", uri, "-o", pulled}, common...)...)
	if !strings.Contains(out, digest) {
		t.Fatalf("pull printed %q", out)
	}
	if b, err := os.ReadFile(pulled); err != nil || !bytes.Equal(b, wasm) {
		t.Fatalf("pull -o wrote %d bytes (%v), want the pushed module", len(b), err)
	}

	var entries []oci.StoreEntry
	if err := json.Unmarshal([]byte(mustExecute(t, append([]string{"policies", "-o", "json"}, common...)...)), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].URI != uri || entries[0].Digest != digest || entries[0].Title != "cli-policy" || entries[0].Size != int64(len(wasm)) {
		t.Fatalf("policies -o json: %+v", entries)
	}
	table := mustExecute(t, append([]string{"policies"}, common...)...)
	if !strings.Contains(table, "URI") || !strings.Contains(table, uri) || !strings.Contains(table, "cli-policy") {
		t.Fatalf("policies table:\n%s", table)
	}
	if y := mustExecute(t, append([]string{"policies", "-o", "yaml"}, common...)...); !strings.Contains(y, "uri: "+uri) {
		t.Fatalf("policies -o yaml:\n%s", y)
	}

	// inspect resolves registry:// through the resolver hook and the root's persistent flags.
	if insp := mustExecute(t, append([]string{"inspect", uri + "@" + digest}, common...)...); !strings.Contains(insp, "cli-policy") {
		t.Fatalf("inspect of a registry module:\n%s", insp)
	}

	// save (pulling the missing plain module), then load into an empty store.
	bundle := filepath.Join(dir, "bundle.tar")
	mustExecute(t, append([]string{"save", "-o", bundle, uri, reg.URI("cli/plain:v1")}, common...)...)
	other := filepath.Join(dir, "airgap-store")
	out = mustExecute(t, "load", bundle, "--store-path", other)
	if !strings.Contains(out, uri) || !strings.Contains(out, reg.URI("cli/plain:v1")) {
		t.Fatalf("load printed %q", out)
	}
	if got := mustExecute(t, "policies", "--store-path", other); !strings.Contains(got, digest) {
		t.Fatalf("loaded store:\n%s", got)
	}

	out = mustExecute(t, append([]string{"rm", uri}, common...)...)
	if !strings.Contains(out, "removed "+uri) {
		t.Fatalf("rm printed %q", out)
	}
	if _, _, err := execute(t, append([]string{"rm", uri}, common...)...); err == nil || !strings.Contains(err.Error(), "not in the local store") {
		t.Fatalf("second rm: %v", err)
	}

	for _, bad := range [][]string{
		{"pull", "https://example.com/x.wasm"},
		{"pull", "registry://127.0.0.1/UPPER:v1"},
		{"push", file, "registry://"},
		{"policies", "-o", "xml"},
		{"save", uri},
	} {
		if _, _, err := execute(t, append(bad, common...)...); err == nil {
			t.Fatalf("tollgate %v succeeded", bad)
		}
	}
}

// A real policy (examples/required-labels, built by make policies) pushed to
// the registry runs from its registry:// URI, pinned by digest and by tag.
func TestRunRegistryModule(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	store := filepath.Join(t.TempDir(), "store")
	common := []string{"--store-path", store, "--sources-path", reg.SourcesPath, "--docker-config-json-path", reg.DockerConfigPath}
	policy := testfixture.Path("examples/required-labels/policy.wasm")
	testfixture.File(t, "examples/required-labels/policy.wasm")
	uri := reg.URI("examples/required-labels:v1")
	digest := strings.TrimSpace(mustExecute(t, append([]string{"push", policy, uri}, common...)...))
	for _, u := range []string{uri, uri + "@" + digest} {
		root := ociRoot()
		root.AddCommand(newRunCmd())
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{"run", u,
			"-r", testfixture.Path("examples/required-labels/testdata/pod-missing-label.json"),
			"-s", testfixture.Path("examples/required-labels/testdata/settings.json")}, common...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("run %s: %v\n%s", u, err, errOut.String())
		}
		if !strings.Contains(out.String(), `"allowed":false`) {
			t.Fatalf("run %s printed %s", u, out.String())
		}
	}
}
