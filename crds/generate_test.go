package crds

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate regenerates the CRD manifests and the deep-copy functions with the
// pinned controller-gen and fails when the committed files differ: run `make crds`.
func TestGeneratedUpToDate(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cg := controllerGen(t, root)
	// controller-gen reads the types in a child process, which go test's result cache does
	// not see: read them here so that an edit of the types reruns this test.
	srcs, _ := filepath.Glob(filepath.Join(root, "crds", "api", "v1", "*.go"))
	for _, s := range srcs {
		if _, err := os.ReadFile(s); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	cmd := exec.Command(cg, "crd", "paths=./crds/api/...", "output:crd:artifacts:config="+out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen crd: %v\n%s", err, b)
	}
	got, names, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	if len(gen) != len(names) {
		t.Errorf("controller-gen wrote %d manifests, crds/ has %d (%v): run make crds", len(gen), len(names), names)
	}
	for _, g := range gen {
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[filepath.Base(g)], want) {
			t.Errorf("crds/%s is out of date with crds/api/v1: run make crds", filepath.Base(g))
		}
	}
	// The deep-copy functions: generate into a copy of the package and compare.
	pkg := filepath.Join(root, "crds", "api", "v1")
	committed, err := os.ReadFile(filepath.Join(pkg, "zz_generated.deepcopy.go"))
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(cg, "object", "paths=./crds/api/...", "output:object:dir="+out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen object: %v\n%s", err, b)
	}
	fresh, err := os.ReadFile(filepath.Join(out, "zz_generated.deepcopy.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, fresh) {
		t.Errorf("crds/api/v1/zz_generated.deepcopy.go is out of date: run make crds")
	}
}

// controllerGen returns the pinned controller-gen, installing it (cached outside the
// repository) like `make crds` does.
func controllerGen(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "scripts", "install-k8s-tools.sh"), "controller-gen")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("installing controller-gen: %v\n%s", err, stderr.String())
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "controller-gen="); ok {
			return p
		}
	}
	t.Fatalf("install-k8s-tools.sh printed no controller-gen path:\n%s", b)
	return ""
}
