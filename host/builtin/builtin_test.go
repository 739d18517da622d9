package builtin

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestModule(t *testing.T) {
	for _, name := range []string{"", "nope", "../modules/README", "a/b", "mutating-admission-policy.wasm"} {
		_, err := Module(name)
		if !errors.Is(err, ErrNotBuiltin) {
			t.Errorf("Module(%q): err %v, want ErrNotBuiltin", name, err)
		}
	}
	for _, name := range Known {
		b, err := Module(name)
		if slices.Contains(Names(), name) {
			if err != nil {
				t.Fatalf("Module(%q): %v", name, err)
			}
			if !bytes.HasPrefix(b, []byte("\x00asm")) {
				t.Fatalf("Module(%q) is not a Wasm module", name)
			}
			continue
		}
		// Not compiled in: the error says how to fix it.
		if !errors.Is(err, ErrNotBuiltin) || !strings.Contains(err.Error(), "run make policies then make build") {
			t.Fatalf("Module(%q): %v", name, err)
		}
	}
}

func TestNamesAreKnown(t *testing.T) {
	for _, n := range Names() {
		if !slices.Contains(Known, n) {
			t.Errorf("embedded module %q is not in Known", n)
		}
	}
}

// TestDigest checks that the digest Digest gives (from the .sha256 file that
// scripts/embed-builtins.sh embeds, or computed) is the digest of the
// module's bytes, and that an unknown name is an error.
func TestDigest(t *testing.T) {
	for _, name := range Names() {
		b, err := Module(name)
		if err != nil {
			t.Fatal(err)
		}
		want := "sha256:" + fmt.Sprintf("%x", sha256.Sum256(b))
		got, err := Digest(name)
		if err != nil {
			t.Fatalf("Digest(%q): %v", name, err)
		}
		if got != want {
			t.Fatalf("Digest(%q) = %s, the module's bytes hash to %s: run scripts/embed-builtins.sh", name, got, want)
		}
		if _, ok := embeddedDigest(name, int64(len(b))); !ok {
			t.Errorf("modules/%s.wasm.sha256 is missing or stale: the digest is computed at every start (run scripts/embed-builtins.sh)", name)
		}
		if IsSettingsKeyed(got) != SettingsKeyed(name) {
			t.Errorf("IsSettingsKeyed(digest of %s) = %v, SettingsKeyed = %v", name, IsSettingsKeyed(got), SettingsKeyed(name))
		}
	}
	// With the .sha256 files, a digest costs no read of the module (which
	// copies it: 66 MB for the MutatingAdmissionPolicy at every policy load).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 10; i++ {
		for _, name := range Names() {
			IsSettingsKeyed("sha256:" + strings.Repeat("0", 64))
			_, _ = Digest(name)
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("digests allocated %d bytes: the modules were read", n)
	}
	if _, err := Digest("nope"); !errors.Is(err, ErrNotBuiltin) {
		t.Fatalf("Digest(nope): %v", err)
	}
	if IsSettingsKeyed("sha256:" + strings.Repeat("0", 64)) {
		t.Fatal("IsSettingsKeyed: true for a digest of no built-in module")
	}
}

func TestEmbeddedDigestRejects(t *testing.T) {
	name := "mutating-admission-policy"
	if !slices.Contains(Names(), name) {
		t.Skip("built-in module not in this binary")
	}
	b, _ := Module(name)
	if _, ok := embeddedDigest(name, int64(len(b))+1); ok {
		t.Fatal("embeddedDigest accepted a .sha256 file whose size is not the module's")
	}
}

// TestModuleInPlace: a built-in module is the binary's embedded bytes
// themselves, not a copy: the same bytes as embed.FS.ReadFile gives, and no
// heap allocated to get them (66 MB per load for the MAP module before).
func TestModuleInPlace(t *testing.T) {
	names := Names()
	if len(names) == 0 {
		t.Skip("no built-in module in this build (make policies)")
	}
	for _, name := range names {
		want, err := modules.ReadFile("modules/" + name + ".wasm")
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		allocated := testing.AllocsPerRun(3, func() { got, err = Module(name) })
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Module(%q): %d bytes, err %v; want the %d embedded bytes", name, len(got), err, len(want))
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		if _, err := Module(name); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&ms)
		if grown := ms.TotalAlloc - before; grown >= uint64(len(want))/2 {
			t.Fatalf("Module(%q) allocated %d bytes for a %d-byte module (%v allocations): a copy", name, grown, len(want), allocated)
		}
	}
}
