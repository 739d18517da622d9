package builtin

import (
	"bytes"
	"errors"
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
