package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// lintTree is a throw-away repository of two modules (the root and sub, which requires lib
// through a local replace) holding a copy of scripts/lint.sh, clean until a test breaks it.
func lintTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	script, err := os.ReadFile(testfixture.Path("scripts/lint.sh"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "scripts/lint.sh"), string(script))
	if err := os.Chmod(filepath.Join(root, "scripts/lint.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "go.mod"), "module example.com/root\n\ngo 1.26\n")
	write(t, filepath.Join(root, "main.go"), "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"ok\") }\n")
	write(t, filepath.Join(root, "lib/go.mod"), "module example.com/lib\n\ngo 1.26\n")
	write(t, filepath.Join(root, "lib/lib.go"), "package lib\n\n// Answer is the answer.\nconst Answer = 42\n")
	write(t, filepath.Join(root, "sub/go.mod"), "module example.com/sub\n\ngo 1.26\n\nrequire example.com/lib v0.0.0\n\nreplace example.com/lib => ../lib\n")
	write(t, filepath.Join(root, "sub/sub.go"), "package sub\n\nimport \"example.com/lib\"\n\n// Answer is lib's.\nconst Answer = lib.Answer\n")
	return root
}

func lint(t *testing.T, root string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "scripts/lint.sh"))
	cmd.Dir = root
	// offline: every module of the tree is local
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestLintChecksEveryModule: scripts/lint.sh (make lint, the first step of make test) passes on a
// clean tree of three modules and fails on an unformatted file, a go vet finding and an untidy
// go.mod, each in a submodule, naming the module and the check (and the file for gofmt).
func TestLintChecksEveryModule(t *testing.T) {
	if out, err := lint(t, lintTree(t)); err != nil || !strings.Contains(out, "clean in 3 modules") {
		t.Fatalf("clean tree: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name   string
		break_ func(root string)
		want   []string
	}{
		{"unformatted file", func(root string) {
			write(t, filepath.Join(root, "sub/ugly.go"), "package sub\n\nfunc  ugly( ) {}\n")
		}, []string{"FAILED sub: gofmt", "sub/ugly.go"}},
		{"vet finding", func(root string) {
			write(t, filepath.Join(root, "sub/vet.go"), "package sub\n\nimport \"fmt\"\n\nfunc bad() string { return fmt.Sprintf(\"%d\", \"not a number\") }\n")
		}, []string{"FAILED sub: go vet", "Sprintf format %d has arg"}},
		{"untidy go.mod", func(root string) {
			// sub no longer imports lib, but its go.mod still requires it
			write(t, filepath.Join(root, "sub/sub.go"), "package sub\n\n// Answer is 42.\nconst Answer = 42\n")
		}, []string{"FAILED sub: go mod tidy -diff", "-require example.com/lib v0.0.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := lintTree(t)
			tc.break_(root)
			out, err := lint(t, root)
			if err == nil {
				t.Fatalf("lint passed:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "FAILED lib") || strings.Contains(out, "FAILED .:") {
				t.Errorf("a clean module reported:\n%s", out)
			}
		})
	}
}
