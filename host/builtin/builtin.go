package builtin

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed modules
var modules embed.FS

// ErrNotBuiltin: no built-in module has that name, or it was not compiled in.
var ErrNotBuiltin = errors.New("unknown built-in module")

// Known are the built-in modules tollgate ships, whether or not this binary
// was built with them.
var Known = []string{"mutating-admission-policy", "gatekeeper-mutation"}

// Module returns the bytes of the built-in module name.
func Module(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return nil, fmt.Errorf("%w %q (built-in modules: %s)", ErrNotBuiltin, name, strings.Join(Known, ", "))
	}
	b, err := modules.ReadFile("modules/" + name + ".wasm")
	if err == nil {
		return b, nil
	}
	for _, k := range Known {
		if k == name {
			return nil, fmt.Errorf("%w: built-in module %s is not in this binary; run make policies then make build", ErrNotBuiltin, name)
		}
	}
	return nil, fmt.Errorf("%w %q (built-in modules: %s)", ErrNotBuiltin, name, strings.Join(Known, ", "))
}

// Names lists the built-in modules compiled into this binary, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(modules, "modules")
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".wasm"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
