package builtin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// embedded holds the modules compiled into this binary, by name. zz_embedded.go, which
// scripts/embed-builtins.sh writes (make policies) next to the modules it copies into modules/,
// embeds each module as a []byte variable (//go:embed) and registers it here with its digest. A
// clone has no such file, so `go build` works before `make policies` and the binary has no
// built-in module.
//
// A []byte variable of //go:embed is the binary's own data, mapped from the executable: reading a
// module copies nothing and only the pages read become resident, where embed.FS.ReadFile would
// copy the module (46 MB for the MutatingAdmissionPolicy) onto the heap at every load.
var embedded = map[string]embeddedModule{}

type embeddedModule struct {
	data []byte
	// digest is "sha256:<hex>" as embed-builtins.sh computed it, for size bytes; a digest for
	// another size (a module copied by hand) is not used.
	digest string
	size   int64
}

// register adds a module compiled into the binary (called by zz_embedded.go's init).
func register(name string, data []byte, digest string, size int64) {
	embedded[name] = embeddedModule{data: data, digest: digest, size: size}
}

// ErrNotBuiltin: no built-in module has that name, or it was not compiled in.
var ErrNotBuiltin = errors.New("unknown built-in module")

// Known are the built-in modules tollgate ships, whether or not this binary
// was built with them.
var Known = []string{"mutating-admission-policy", "gatekeeper-mutation"}

// settingsKeyed are the built-in modules whose guest keeps no state between
// calls other than what it derives from the settings it receives with each
// call, cached by those settings (the MutatingAdmissionPolicy guest's
// engineFor, the gatekeeper-mutation guest's system): one instance answers
// the policies of several settings as instances of their own would. See
// RATIONALE.md "Why are instances shared only between policies of a
// settings-keyed built-in module?".
var settingsKeyed = []string{"mutating-admission-policy", "gatekeeper-mutation"}

// SettingsKeyed reports whether the built-in module name keys all the state
// its guest keeps between calls by the settings of each call, so that its
// instances may serve several policies (policy.Spec.ShareInstances).
func SettingsKeyed(name string) bool { return slices.Contains(settingsKeyed, name) }

// Module returns the bytes of the built-in module name.
func Module(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return nil, fmt.Errorf("%w %q (built-in modules: %s)", ErrNotBuiltin, name, strings.Join(Known, ", "))
	}
	if m, ok := embedded[name]; ok {
		return m.data, nil
	}
	return nil, notBuiltin(name)
}

// notBuiltin is Module's error for a name that is not compiled in: a known module the binary was
// built without says how to build it in.
func notBuiltin(name string) error {
	if slices.Contains(Known, name) {
		return fmt.Errorf("%w: built-in module %s is not in this binary; run make policies (or scripts/embed-builtins.sh once policies/%s/policy.wasm is built), then build again", ErrNotBuiltin, name, name)
	}
	return fmt.Errorf("%w %q (built-in modules: %s)", ErrNotBuiltin, name, strings.Join(Known, ", "))
}

// Digest is the sha256 digest ("sha256:<hex>") of the built-in module name,
// as host/wasm.Digest computes it. scripts/embed-builtins.sh writes it into
// zz_embedded.go with the module's size, so that a start does not hash the
// module (46 MB for the MutatingAdmissionPolicy). When that digest is not for
// the module's size, or not a digest, it is computed once per process.
func Digest(name string) (string, error) {
	m, ok := embedded[name]
	if !ok {
		return "", notBuiltin(name)
	}
	if d, ok := m.embeddedDigest(); ok {
		return d, nil
	}
	v, _ := computed.LoadOrStore(name, sync.OnceValue(func() string { return digestOf(m.data) }))
	return v.(func() string)(), nil
}

// computed holds, by module name, the digests computed in this process.
var computed sync.Map // string -> func() string

// embeddedDigest is the digest embed-builtins.sh wrote, when it is one
// ("sha256:<64 lower-case hex>") and was written for the module's size.
func (m embeddedModule) embeddedDigest() (string, bool) {
	hexPart, isSHA := strings.CutPrefix(m.digest, "sha256:")
	if !isSHA || len(hexPart) != 64 || m.size != int64(len(m.data)) {
		return "", false
	}
	if _, err := hex.DecodeString(hexPart); err != nil || strings.ToLower(hexPart) != hexPart {
		return "", false
	}
	return m.digest, true
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// IsSettingsKeyed reports whether digest is the digest of a settings-keyed
// built-in module compiled into this binary (see SettingsKeyed): whatever URI
// a policy names it by, those bytes are that module.
func IsSettingsKeyed(digest string) bool {
	for _, name := range settingsKeyed {
		if d, err := Digest(name); err == nil && d == digest {
			return true
		}
	}
	return false
}

// Names lists the built-in modules compiled into this binary, sorted.
func Names() []string {
	names := make([]string, 0, len(embedded))
	for n := range embedded {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
