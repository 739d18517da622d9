package builtin

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// requireEmbedded fails the test unless every known built-in module is compiled into the test
// binary: tests never skip because a module is missing.
func requireEmbedded(t *testing.T) {
	t.Helper()
	for _, name := range Known {
		if !slices.Contains(Names(), name) {
			t.Fatalf("built-in module %s is not compiled in (no host/builtin/zz_embedded.go or no entry for it): "+
				"run make policies, or scripts/embed-builtins.sh once policies/%s/policy.wasm is built", name, name)
		}
	}
}

func TestModule(t *testing.T) {
	requireEmbedded(t)
	for _, name := range []string{"", "nope", "../modules/README", "a/b", "mutating-admission-policy.wasm"} {
		_, err := Module(name)
		if !errors.Is(err, ErrNotBuiltin) {
			t.Errorf("Module(%q): err %v, want ErrNotBuiltin", name, err)
		}
	}
	for _, name := range Known {
		b, err := Module(name)
		if err != nil {
			t.Fatalf("Module(%q): %v", name, err)
		}
		if !bytes.HasPrefix(b, []byte("\x00asm")) {
			t.Fatalf("Module(%q) is not a Wasm module", name)
		}
	}
}

// TestNotBuiltin: a known module the binary was built without says how to build it in; an
// unknown name lists the known ones.
func TestNotBuiltin(t *testing.T) {
	err := notBuiltin("gatekeeper-mutation")
	if !errors.Is(err, ErrNotBuiltin) || !strings.Contains(err.Error(), "run make policies (or scripts/embed-builtins.sh once policies/gatekeeper-mutation/policy.wasm is built), then build again") {
		t.Errorf("notBuiltin(known): %v", err)
	}
	err = notBuiltin("nope")
	if !errors.Is(err, ErrNotBuiltin) || !strings.Contains(err.Error(), strings.Join(Known, ", ")) {
		t.Errorf("notBuiltin(unknown): %v", err)
	}
}

func TestNamesAreKnown(t *testing.T) {
	requireEmbedded(t)
	for _, n := range Names() {
		if !slices.Contains(Known, n) {
			t.Errorf("embedded module %q is not in Known", n)
		}
	}
}

// TestDigest checks that the digest Digest gives (the one scripts/embed-builtins.sh wrote into
// zz_embedded.go, or computed) is the digest of the module's bytes, and that an unknown name is
// an error.
func TestDigest(t *testing.T) {
	requireEmbedded(t)
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
		if _, ok := embedded[name].embeddedDigest(); !ok {
			t.Errorf("zz_embedded.go has no digest for %s's size: the digest is computed at every start (run scripts/embed-builtins.sh)", name)
		}
		if IsSettingsKeyed(got) != SettingsKeyed(name) {
			t.Errorf("IsSettingsKeyed(digest of %s) = %v, SettingsKeyed = %v", name, IsSettingsKeyed(got), SettingsKeyed(name))
		}
	}
	// With the written digests, a digest hashes no module.
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

// TestWrittenDigestRejected: a written digest for another size (a module copied by hand after
// embed-builtins.sh ran) or that is not a sha256 digest is not used; Digest hashes the module.
func TestWrittenDigestRejected(t *testing.T) {
	data := []byte("\x00asm\x01\x00\x00\x00")
	want := digestOf(data)
	zero := "sha256:" + strings.Repeat("0", 64)
	for i, tc := range []struct {
		digest string
		size   int64
	}{
		{zero, int64(len(data)) + 1},
		{"sha256:" + strings.Repeat("A", 64), int64(len(data))},
		{"sha512:" + strings.Repeat("0", 64), int64(len(data))},
		{"sha256:" + strings.Repeat("0", 63), int64(len(data))},
	} {
		name := fmt.Sprintf("test-written-digest-%d", i)
		register(name, data, tc.digest, tc.size)
		got, err := Digest(name)
		delete(embedded, name)
		if err != nil || got != want {
			t.Errorf("written %q for %d bytes: Digest = %q, %v; want the computed %s", tc.digest, tc.size, got, err, want)
		}
	}
	register("test-written-digest-ok", data, zero, int64(len(data)))
	got, _ := Digest("test-written-digest-ok")
	delete(embedded, "test-written-digest-ok")
	if got != zero {
		t.Errorf("a well-formed digest for the module's size: Digest = %q, want it used (%s)", got, zero)
	}
}

// TestModuleInPlace: a built-in module is the binary's embedded bytes themselves, not a copy:
// the bytes of modules/NAME.wasm, the same memory at every call, and no heap allocated to get
// them (46 MB per load for the MAP module when it was copied).
func TestModuleInPlace(t *testing.T) {
	requireEmbedded(t)
	for _, name := range Names() {
		want, err := os.ReadFile("modules/" + name + ".wasm")
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		allocs := testing.AllocsPerRun(3, func() { got, err = Module(name) })
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Module(%q): %d bytes, err %v; want the %d bytes of modules/%s.wasm", name, len(got), err, len(want), name)
		}
		again, _ := Module(name)
		if &again[0] != &got[0] {
			t.Errorf("Module(%q) gave two different copies", name)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		if _, err := Module(name); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&ms)
		if grown := ms.TotalAlloc - before; allocs > 0 || grown >= uint64(len(want))/2 {
			t.Fatalf("Module(%q) allocated %d bytes (%v allocations) for a %d-byte module: a copy", name, grown, allocs, len(want))
		}
	}
}
