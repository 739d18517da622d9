package scripts_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// tree is a throw-away repository holding a copy of scripts/build-policies.sh, with a build
// cache of its own (cache) unless it shares another tree's (newClone).
type tree struct {
	t     *testing.T
	root  string
	cache string
}

func newTree(t *testing.T) *tree {
	t.Helper()
	return newClone(t, t.TempDir())
}

// newClone is a tree whose build cache is cache: another clone on the same machine.
func newClone(t *testing.T, cache string) *tree {
	t.Helper()
	root := t.TempDir()
	script, err := os.ReadFile(testfixture.Path("scripts/build-policies.sh"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "scripts/build-policies.sh"), string(script))
	if err := os.Chmod(filepath.Join(root, "scripts/build-policies.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &tree{t: t, root: root, cache: cache}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// policy writes a standard-Go policy module at dir (relative to the tree).
func (tr *tree) policy(dir, kind, mainGo string) {
	tr.t.Helper()
	write(tr.t, filepath.Join(tr.root, dir, "go.mod"), "module example.com/p\n\ngo 1.26\n")
	write(tr.t, filepath.Join(tr.root, dir, "main.go"), mainGo)
	write(tr.t, filepath.Join(tr.root, dir, "policy.build"), kind+"\n")
}

const emptyMain = "package main\n\nfunc main() {}\n"

// run runs the script with extra environment variables and arguments.
func (tr *tree) run(env []string, args ...string) (stderr string, err error) {
	tr.t.Helper()
	cmd := exec.Command(filepath.Join(tr.root, "scripts/build-policies.sh"), args...)
	cmd.Dir = tr.root
	cmd.Env = append(append(os.Environ(), "TOLLGATE_BUILD_CACHE="+tr.cache), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err = cmd.Run()
	return out.String(), err
}

func (tr *tree) mtime(rel string) time.Time {
	tr.t.Helper()
	fi, err := os.Stat(filepath.Join(tr.root, rel))
	if err != nil {
		tr.t.Fatal(err)
	}
	return fi.ModTime()
}

// touch sets a file's modification time to later than anything built so far.
func (tr *tree) touch(rel string) {
	tr.t.Helper()
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(filepath.Join(tr.root, rel), later, later); err != nil {
		tr.t.Fatal(err)
	}
}

// edit appends text to a file of the tree.
func (tr *tree) edit(rel, text string) {
	tr.t.Helper()
	f, err := os.OpenFile(filepath.Join(tr.root, rel), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		tr.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) read(rel string) []byte {
	tr.t.Helper()
	b, err := os.ReadFile(filepath.Join(tr.root, rel))
	if err != nil {
		tr.t.Fatal(err)
	}
	return b
}

func isWasm(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("%s does not start with the Wasm magic number", path)
	}
}

func TestBuildSkipRebuild(t *testing.T) {
	tr := newTree(t)
	tr.policy("examples/p", "go-wasip1", emptyMain)
	write(t, filepath.Join(tr.root, "examples/p/p_test.go"), "package main\n")

	out, err := tr.run(nil)
	if err != nil {
		t.Fatalf("first build: %v\n%s", err, out)
	}
	if !strings.Contains(out, "examples/p") || !strings.Contains(out, "go-wasip1") || !strings.Contains(out, "(copied)") {
		t.Errorf("no progress line naming the policy, its kind and that it was copied:\n%s", out)
	}
	isWasm(t, filepath.Join(tr.root, "examples/p/policy.wasm"))
	isWasm(t, filepath.Join(tr.root, "examples/p/policy.raw.wasm"))
	built := tr.mtime("examples/p/policy.wasm")

	out, err = tr.run(nil)
	if err != nil || !strings.Contains(out, "all 1 policies up to date") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if !tr.mtime("examples/p/policy.wasm").Equal(built) {
		t.Error("an up-to-date policy.wasm was rewritten")
	}

	// A test file is not a source of the module.
	tr.touch("examples/p/p_test.go")
	if out, err = tr.run(nil); err != nil || !strings.Contains(out, "up to date") {
		t.Errorf("after touching a _test.go file: %v\n%s", err, out)
	}

	// Nor is a file's time: the build goes by content.
	tr.touch("examples/p/main.go")
	if out, err = tr.run(nil); err != nil || !strings.Contains(out, "all 1 policies up to date") {
		t.Errorf("after touching main.go: %v\n%s", err, out)
	}

	// A change to a Go source is.
	tr.edit("examples/p/main.go", "var changed = 1\n")
	out, err = tr.run(nil)
	if err != nil || !strings.Contains(out, "1 policies: 0 from cache, 1 built") {
		t.Fatalf("after changing main.go: %v\n%s", err, out)
	}
	if !tr.mtime("examples/p/policy.wasm").After(built) {
		t.Error("policy.wasm was not rebuilt after its source changed")
	}

	// -f rebuilds what is up to date.
	if out, err = tr.run(nil, "-f"); err != nil || !strings.Contains(out, "0 from cache, 1 built") {
		t.Errorf("-f: %v\n%s", err, out)
	}
}

func TestLocalReplaceTargetsAreSources(t *testing.T) {
	tr := newTree(t)
	write(t, filepath.Join(tr.root, "lib/go.mod"), "module example.com/lib\n\ngo 1.26\n")
	write(t, filepath.Join(tr.root, "lib/lib.go"), "package lib\n\nconst Answer = 42\n")
	tr.policy("policies/p", "go-wasip1", "package main\n\nimport \"example.com/lib\"\n\nvar _ = lib.Answer\n\nfunc main() {}\n")
	write(t, filepath.Join(tr.root, "policies/p/go.mod"),
		"module example.com/p\n\ngo 1.26\n\nrequire example.com/lib v0.0.0\n\nreplace example.com/lib => ../../lib\n")
	if out, err := tr.run(nil); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tr.edit("lib/lib.go", "const Question = 6 * 9\n")
	if out, err := tr.run(nil); err != nil || !strings.Contains(out, "0 from cache, 1 built") {
		t.Errorf("a change in a replace target did not rebuild the policy: %v\n%s", err, out)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name, kind, mainGo string
		want               []string
	}{
		{
			name: "unknown kind", kind: "rust-wasi", mainGo: emptyMain,
			want: []string{"FAILED test/testdata/policies/p", `unknown build kind rust-wasi in test/testdata/policies/p/policy.build`},
		},
		{
			name: "compile error", kind: "go-wasip1", mainGo: "package main\n\nfunc main() { undefinedThing() }\n",
			want: []string{"FAILED test/testdata/policies/p (go-wasip1)", "undefined: undefinedThing", "1 of 2 policies failed to build: test/testdata/policies/p"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTree(t)
			tr.policy("test/testdata/policies/p", tt.kind, tt.mainGo)
			tr.policy("examples/ok", "go-wasip1", emptyMain)
			out, err := tr.run(nil)
			if err == nil {
				t.Fatalf("the script succeeded:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			// The other policy is still built.
			isWasm(t, filepath.Join(tr.root, "examples/ok/policy.wasm"))
		})
	}
}

func TestNoPoliciesAndBadArguments(t *testing.T) {
	tr := newTree(t)
	if out, err := tr.run(nil); err != nil || !strings.Contains(out, "no policies found") {
		t.Errorf("empty tree: %v\n%s", err, out)
	}
	out, err := tr.run(nil, "examples/missing")
	if err == nil || !strings.Contains(out, "examples/missing has no policy.build file") {
		t.Errorf("bad argument: %v\n%s", err, out)
	}
}

// TestAnnotate builds with the real tollgate binary as TOLLGATE and checks the metadata it wrote,
// then that a change to metadata.yml re-annotates without recompiling.
func TestAnnotate(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tollgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tollgate")
	build.Dir = testfixture.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tollgate: %v\n%s", err, out)
	}
	tr := newTree(t)
	tr.policy("examples/p", "go-wasip1", emptyMain)
	metadata := "protocolVersion: v1\nrules:\n  - apiGroups: [\"\"]\n    apiVersions: [\"v1\"]\n    resources: [\"pods\"]\n    operations: [\"CREATE\"]\nmutating: false\nannotations:\n  io.kubewarden.policy.title: %s\n"
	write(t, filepath.Join(tr.root, "examples/p/metadata.yml"), strings.ReplaceAll(metadata, "%s", "first"))
	write(t, filepath.Join(tr.root, "examples/p/README.md"), "# p\n\nUsage text.\n")
	env := []string{"TOLLGATE=" + bin}

	out, err := tr.run(env)
	if err != nil || !strings.Contains(out, "(annotated)") {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := inspect(t, bin, filepath.Join(tr.root, "examples/p/policy.wasm")); got["io.kubewarden.policy.title"] != "first" ||
		!strings.Contains(got["io.kubewarden.policy.usage"], "Usage text.") {
		t.Errorf("annotations = %v, want the title and README as usage", got)
	}
	raw := tr.mtime("examples/p/policy.raw.wasm")

	write(t, filepath.Join(tr.root, "examples/p/metadata.yml"), strings.ReplaceAll(metadata, "%s", "second"))
	tr.touch("examples/p/metadata.yml")
	if out, err := tr.run(env); err != nil || !strings.Contains(out, "(annotated)") {
		t.Fatalf("%v\n%s", err, out)
	}
	if !tr.mtime("examples/p/policy.raw.wasm").Equal(raw) {
		t.Error("a metadata.yml change recompiled the module")
	}
	if got := inspect(t, bin, filepath.Join(tr.root, "examples/p/policy.wasm")); got["io.kubewarden.policy.title"] != "second" {
		t.Errorf("title = %q after the metadata.yml change, want second", got["io.kubewarden.policy.title"])
	}

	// Metadata that annotate rejects fails the build, naming the policy.
	write(t, filepath.Join(tr.root, "examples/p/metadata.yml"), "protocolVersion: v7\nrules: []\n")
	tr.touch("examples/p/metadata.yml")
	out, err = tr.run(env)
	if err == nil || !strings.Contains(out, "FAILED examples/p: "+bin+" annotate") {
		t.Errorf("bad metadata: %v\n%s", err, out)
	}
}

// inspect returns the annotations tollgate inspect reads from a module.
func inspect(t *testing.T, bin, module string) map[string]string {
	t.Helper()
	out, err := exec.Command(bin, "inspect", module, "-o", "json").Output()
	if err != nil {
		t.Fatalf("tollgate inspect: %v\n%s", err, out)
	}
	var doc struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("tollgate inspect -o json: %v\n%s", err, out)
	}
	return doc.Annotations
}

// TestWasmOptArgs: a directory with wasm-opt.args is also built the way Kubewarden's CI builds it,
// through binaryen 116's wasm-opt (scripts/install-binaryen.sh), into policy.opt.wasm; an empty
// wasm-opt.args fails naming the file.
func TestWasmOptArgs(t *testing.T) {
	install := exec.Command(testfixture.Path("scripts/install-binaryen.sh"))
	var stderr bytes.Buffer
	install.Stderr = &stderr
	out, err := install.Output()
	if err != nil {
		t.Fatalf("scripts/install-binaryen.sh: %v\n%s", err, stderr.String())
	}
	env := []string{"WASM_OPT=" + strings.TrimSpace(string(out))}

	tr := newTree(t)
	tr.policy("examples/p", "go-wasi", emptyMain)
	write(t, filepath.Join(tr.root, "examples/p/wasm-opt.args"), "--all-features -Oz\n")
	// --no-wasm-opt (make demo) builds the plain module alone.
	if log, err := tr.run(env, "--no-wasm-opt"); err != nil || strings.Contains(log, "wasm-opt --all-features") {
		t.Fatalf("--no-wasm-opt: %v\n%s", err, log)
	}
	if _, err := os.Stat(filepath.Join(tr.root, "examples/p/policy.opt.wasm")); !os.IsNotExist(err) {
		t.Fatalf("--no-wasm-opt wrote policy.opt.wasm: %v", err)
	}
	log, err := tr.run(env)
	if err != nil || !strings.Contains(log, "wasm-opt --all-features -Oz") {
		t.Fatalf("%v\n%s", err, log)
	}
	plain, _ := os.ReadFile(filepath.Join(tr.root, "examples/p/policy.wasm"))
	opt, _ := os.ReadFile(filepath.Join(tr.root, "examples/p/policy.opt.wasm"))
	isWasm(t, filepath.Join(tr.root, "examples/p/policy.opt.wasm"))
	isWasm(t, filepath.Join(tr.root, "examples/p/policy.opt.raw.wasm"))
	if len(opt) == 0 || len(opt) >= len(plain) {
		t.Errorf("policy.opt.wasm is %d bytes, policy.wasm %d: not optimized", len(opt), len(plain))
	}
	if _, err := os.Stat(filepath.Join(tr.root, "examples/p/policy.opt.go.wasm")); !os.IsNotExist(err) {
		t.Errorf("the intermediate policy.opt.go.wasm is left behind: %v", err)
	}
	if log, err := tr.run(env); err != nil || !strings.Contains(log, "all 1 policies up to date") {
		t.Errorf("second run: %v\n%s", err, log)
	}

	write(t, filepath.Join(tr.root, "examples/p/wasm-opt.args"), "\n")
	tr.touch("examples/p/wasm-opt.args")
	log, err = tr.run(env)
	if err == nil || !strings.Contains(log, "examples/p/wasm-opt.args is empty") {
		t.Errorf("empty wasm-opt.args: %v\n%s", err, log)
	}
}
