package testfixture

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Root is the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Path is the absolute path of a repository-relative file.
func Path(rel string) string { return filepath.Join(Root(), filepath.FromSlash(rel)) }

// Module reads the policy.wasm built in dir (repository-relative, e.g.
// "examples/capabilities-drop").
func Module(t testing.TB, dir string) []byte {
	t.Helper()
	return File(t, dir+"/policy.wasm")
}

// File reads a repository-relative file, failing with a hint when it is missing.
func File(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(rel))
	if err != nil {
		t.Fatalf("fixture %s: %v (build the policies first: make policies)", rel, err)
	}
	return b
}
