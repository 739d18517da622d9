package scripts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cacheEntries returns the modules the build cache holds.
func cacheEntries(t *testing.T, cache string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(cache, "*", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCacheAcrossClones: a second clone on the machine (same build cache) builds nothing that did
// not change: its outputs come from the cache, byte for byte. A change to a source builds that
// policy alone; going back to the first version (a branch switch) builds nothing again.
func TestCacheAcrossClones(t *testing.T) {
	cache := t.TempDir()
	first := newClone(t, cache)
	first.policy("examples/a", "go-wasip1", emptyMain)
	first.policy("examples/b", "go-wasi", emptyMain)
	if out, err := first.run(nil); err != nil || !strings.Contains(out, "2 policies: 0 from cache, 2 built") {
		t.Fatalf("first clone: %v\n%s", err, out)
	}
	// one entry each, the compiler's output: policy.wasm is a copy of it (no metadata.yml)
	if n := len(cacheEntries(t, cache)); n != 2 {
		t.Errorf("%d cache entries after building 2 policies, want 2 (one compiler output each)", n)
	}

	second := newClone(t, cache)
	second.policy("examples/a", "go-wasip1", emptyMain)
	second.policy("examples/b", "go-wasi", emptyMain)
	out, err := second.run(nil)
	if err != nil || !strings.Contains(out, "2 policies: 2 from cache, 0 built, 0 up to date") {
		t.Fatalf("second clone: %v\n%s", err, out)
	}
	for _, p := range []string{"examples/a/policy.wasm", "examples/a/policy.raw.wasm", "examples/b/policy.wasm"} {
		if !bytes.Equal(first.read(p), second.read(p)) {
			t.Errorf("%s differs between the clones", p)
		}
	}

	// A branch that changes b: b alone is built.
	second.edit("examples/b/main.go", "var branch = 2\n")
	if out, err := second.run(nil); err != nil || !strings.Contains(out, "2 policies: 0 from cache, 1 built, 1 up to date") {
		t.Fatalf("after changing b: %v\n%s", err, out)
	}
	changed := second.read("examples/b/policy.wasm")
	// Back on the first branch: b comes from the cache.
	write(t, filepath.Join(second.root, "examples/b/main.go"), emptyMain)
	if out, err := second.run(nil); err != nil || !strings.Contains(out, "2 policies: 1 from cache, 0 built, 1 up to date") {
		t.Fatalf("back on the first branch: %v\n%s", err, out)
	}
	if !bytes.Equal(second.read("examples/b/policy.wasm"), first.read("examples/b/policy.wasm")) || bytes.Equal(changed, first.read("examples/b/policy.wasm")) {
		t.Error("examples/b/policy.wasm is not the first branch's build")
	}

	// The build kind is part of the key: the same sources built as a WASI command are another module.
	write(t, filepath.Join(second.root, "examples/a/policy.build"), "go-wasi\n")
	if out, err := second.run(nil, "examples/a"); err != nil || !strings.Contains(out, "1 policies: 0 from cache, 1 built") {
		t.Fatalf("after changing a's build kind: %v\n%s", err, out)
	}
}

// TestCacheCorruptEntries: an entry whose checksum does not match (cut short, or altered) or
// that has no checksum (a store interrupted between its two renames) is not used: the policy is
// built again and the entry rewritten.
func TestCacheCorruptEntries(t *testing.T) {
	cache := t.TempDir()
	first := newClone(t, cache)
	first.policy("examples/p", "go-wasip1", emptyMain)
	if out, err := first.run(nil); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	entries := cacheEntries(t, cache)
	if len(entries) != 1 {
		t.Fatalf("cache entries %v, want 1", entries)
	}
	good, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		corrupt func(entry string) error
		want    string
	}{
		{"cut short", func(e string) error { return os.WriteFile(e, good[:len(good)/2], 0o644) }, "does not match its checksum"},
		{"altered", func(e string) error {
			bad := bytes.Clone(good)
			bad[len(bad)/2] ^= 0xff
			return os.WriteFile(e, bad, 0o644)
		}, "does not match its checksum"},
		{"no checksum", func(e string) error { return os.Remove(strings.TrimSuffix(e, ".wasm") + ".sha256") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.corrupt(entries[0]); err != nil {
				t.Fatal(err)
			}
			clone := newClone(t, cache)
			clone.policy("examples/p", "go-wasip1", emptyMain)
			out, err := clone.run(nil)
			if err != nil || !strings.Contains(out, "1 policies: 0 from cache, 1 built") || !strings.Contains(out, tc.want) {
				t.Fatalf("%v\n%s", err, out)
			}
			if !bytes.Equal(clone.read("examples/p/policy.wasm"), good) {
				t.Error("the rebuilt policy.wasm is not the module first built")
			}
			if b, err := os.ReadFile(entries[0]); err != nil || !bytes.Equal(b, good) {
				t.Errorf("the cache entry was not rewritten: %v", err)
			}
			// and the rewritten entry serves the next clone
			next := newClone(t, cache)
			next.policy("examples/p", "go-wasip1", emptyMain)
			if out, err := next.run(nil); err != nil || !strings.Contains(out, "1 from cache, 0 built") {
				t.Fatalf("after the rewrite: %v\n%s", err, out)
			}
		})
	}
}
