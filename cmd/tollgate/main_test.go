package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// tollgate runs the CLI in-process and returns stdout and the error.
func tollgate(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append(args, cacheFlag(t, args)...))
	err := cmd.Execute()
	return out.String(), err
}

// cacheFlag keeps tests off the user's compilation cache for commands that load modules.
func cacheFlag(t *testing.T, args []string) []string {
	if len(args) > 0 && (args[0] == "run" || args[0] == "bench" || args[0] == "annotate") {
		return []string{"--cache-dir", sharedCache}
	}
	return nil
}

var sharedCache string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "tollgate-cli-cache")
	if err != nil {
		panic(err)
	}
	sharedCache = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

func ex(p string) string { return testfixture.Path("examples/" + p) }

// fileWriter returns a function that writes content to the file name in dir
// and returns its path.
func fileWriter(t *testing.T, dir string) func(name, content string) string {
	return func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestRunMutation(t *testing.T) {
	out, err := tollgate(t, "", "run", ex("capabilities-drop/policy.wasm"), "-r", ex("capabilities-drop/testdata/pod-adds-capabilities.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"allowed":true`) || !strings.Contains(out, `"patchType":"JSONPatch"`) {
		t.Fatalf("want one line of compact JSON with a patch, got %q", out)
	}
	var resp struct {
		Patch string `json:"patch"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatal(err)
	}
	patch, _ := base64.StdEncoding.DecodeString(resp.Patch)
	if !strings.Contains(string(patch), `"BPF"`) || !strings.Contains(string(patch), `securityContext/capabilities/drop`) {
		t.Fatalf("patch does not drop BPF: %s", patch)
	}
}

func TestRunFromStdinAndReview(t *testing.T) {
	review := testfixture.File(t, "examples/capabilities-drop/testdata/review-pod-adds-capabilities.json")
	out, err := tollgate(t, string(review), "run", ex("capabilities-drop/policy.wasm"), "-r", "-", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "allowed: true") || !strings.Contains(out, "patchType: JSONPatch") {
		t.Fatalf("yaml output: %s", out)
	}
}

func TestRunRejection(t *testing.T) {
	out, err := tollgate(t, "", "run", ex("required-labels/policy.wasm"), "-r", ex("required-labels/testdata/pod-missing-label.json"),
		"-s", ex("required-labels/testdata/settings.json"))
	if err != nil {
		t.Fatalf("a rejection is an evaluated policy: exit 0 expected, got %v", err)
	}
	if !strings.Contains(out, `"allowed":false`) || !strings.Contains(out, `mandatory label`) || strings.Contains(out, "patch") {
		t.Fatalf("got %s", out)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	pod := ex("required-labels/testdata/pod-no-labels.json")
	mod := ex("required-labels/policy.wasm")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"missing module", []string{"run", filepath.Join(dir, "nope.wasm"), "-r", pod}, []string{"nope.wasm", "no such file"}},
		{"not wasm", []string{"run", testfixture.Path("test/testdata/policies/not-wasm.wasm"), "-r", pod}, []string{"not a WebAssembly module"}},
		{"missing request", []string{"run", mod, "-r", filepath.Join(dir, "req.json")}, []string{"req.json", "no such file"}},
		{"request not json", []string{"run", mod, "-r", write("bad.json", "{\n \"uid\": \n")}, []string{"bad.json", "invalid JSON at line 2, column 9"}},
		{"request not admission", []string{"run", mod, "-r", write("cm.json", `{"apiVersion":"v1","kind":"ConfigMap"}`)}, []string{"cm.json", "not an AdmissionReview or AdmissionRequest"}},
		{"settings rejected", []string{"run", mod, "-r", pod, "-s", ex("required-labels/testdata/settings-bad-regex.json")}, []string{"settings rejected by the policy", "invalid regular expression"}},
		{"settings not yaml", []string{"run", mod, "-r", pod, "-s", write("s.yaml", "a: [")}, []string{"s.yaml"}},
		{"settings json flag", []string{"run", mod, "-r", pod, "--settings-json", "{"}, []string{"--settings-json", "invalid JSON"}},
		{"unknown scheme", []string{"run", "ftp://x/y.wasm", "-r", pod}, []string{`unknown module URI scheme "ftp"`}},
		{"bad output", []string{"run", mod, "-r", pod, "-o", "xml"}, []string{`"xml"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tollgate(t, "", tt.args...)
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

func TestAnnotateInspect(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "metadata.yml")
	os.WriteFile(md, []byte("rules:\n- {apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}\nmutating: false\ncontextAware: true\nannotations:\n  io.kubewarden.policy.title: misbehave\n"), 0o644)
	usage := filepath.Join(dir, "README.md")
	os.WriteFile(usage, []byte("# how to use"), 0o644)
	out := filepath.Join(dir, "annotated.wasm")
	in := testfixture.Path("test/testdata/policies/misbehave/policy.raw.wasm")
	if _, err := tollgate(t, "", "annotate", "-m", md, "-u", usage, "-o", out, in); err != nil {
		t.Fatal(err)
	}
	got, err := tollgate(t, "", "inspect", out, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	// protocolVersion came from the module itself; the legacy contextAware field survives.
	if m["protocolVersion"] != "v1" || m["contextAware"] != true || m["annotations"].(map[string]any)["io.kubewarden.policy.usage"] != "# how to use" {
		t.Fatalf("metadata: %v", m)
	}
	human, err := tollgate(t, "", "inspect", out)
	if err != nil || !strings.Contains(human, "Title:") || !strings.Contains(human, "misbehave") || !strings.Contains(human, "Digest:") {
		t.Fatalf("inspect: %v\n%s", err, human)
	}
	// Bad metadata names the file and field.
	os.WriteFile(md, []byte("rules:\n- {apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [PATCH]}\n"), 0o644)
	if _, err := tollgate(t, "", "annotate", "-m", md, "-o", out, in); err == nil || !strings.Contains(err.Error(), "metadata.yml") || !strings.Contains(err.Error(), `"PATCH"`) {
		t.Fatalf("want an error naming the file and value, got %v", err)
	}
}

func TestBenchJSON(t *testing.T) {
	out, err := tollgate(t, "", "bench", ex("required-labels/policy.wasm"), "-r", ex("required-labels/testdata/pod-no-labels.json"),
		"-s", ex("required-labels/testdata/settings.json"), "--count", "50", "--warmup", "5", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Count != 50 || rep.P50 <= 0 || rep.P99 < rep.P50 || rep.GuestMean <= 0 || rep.GuestMean > rep.Mean {
		t.Fatalf("report: %+v", rep)
	}
}

func TestVersion(t *testing.T) {
	out, err := tollgate(t, "", "version", "-o", "json")
	if err != nil || !strings.Contains(out, `"wazero"`) {
		t.Fatalf("%v %s", err, out)
	}
}
