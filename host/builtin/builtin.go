package builtin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

//go:embed modules
var modules embed.FS

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
	b, err := readEmbedded("modules/" + name + ".wasm")
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

// readEmbedded returns an embedded file's bytes: the binary's own read-only
// data where it can reach them (embeddedView), so that a start neither copies
// the MutatingAdmissionPolicy module (66 MB of heap, and every page of it
// resident) nor touches the pages a warm load does not read; otherwise a
// copy, 1 MB at a time: embed.FS.ReadFile copies in one memmove (with a page
// fault per page on both sides), which the garbage collector cannot preempt,
// so that a collection starting meanwhile kept the other cores spinning
// until it ended (0.8 s of CPU at serve's start, measured).
//
// The bytes are read-only memory: writing to them crashes the process. No
// reader of a module writes to it (host/wasm, host/metadata and the loaders
// build new slices for anything they change); host/policy's
// TestBuiltinLoadsInPlace loads both built-ins, cold and warm, from the view.
func readEmbedded(path string) ([]byte, error) {
	if b, ok := embeddedView(path); ok {
		return b, nil
	}
	f, err := modules.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	for off := 0; off < len(b); {
		n, err := f.Read(b[off:min(off+1<<20, len(b))])
		off += n
		if err == nil && n == 0 {
			err = io.ErrNoProgress
		}
		if err != nil && off < len(b) {
			return nil, err
		}
	}
	return b, nil
}

// embeddedView is the embedded file's data in place. embed.FS keeps each
// file as a string in the binary's read-only data, and offers no way to it
// but copies; reflect reads the unexported fields (FS.files *[]file, file
// {name, data string}) without copying. When the layout is not that one (a
// later Go), it answers false and the file is copied.
func embeddedView(path string) ([]byte, bool) {
	v := reflect.ValueOf(&modules).Elem()
	if v.Kind() != reflect.Struct || v.NumField() != 1 || v.Type().Field(0).Name != "files" {
		return nil, false
	}
	files := v.Field(0)
	if files.Kind() != reflect.Pointer || files.IsNil() || files.Elem().Kind() != reflect.Slice {
		return nil, false
	}
	list := files.Elem()
	ft := list.Type().Elem()
	if ft.Kind() != reflect.Struct || ft.NumField() < 2 || ft.Field(0).Name != "name" || ft.Field(1).Name != "data" ||
		ft.Field(0).Type.Kind() != reflect.String || ft.Field(1).Type.Kind() != reflect.String {
		return nil, false
	}
	for i := 0; i < list.Len(); i++ {
		f := list.Index(i)
		if f.Field(0).String() != path {
			continue
		}
		data := f.Field(1).String()
		if len(data) == 0 {
			return nil, false
		}
		return unsafe.Slice(unsafe.StringData(data), len(data)), true
	}
	return nil, false
}

// Digest is the sha256 digest ("sha256:<hex>") of the built-in module name,
// as host/wasm.Digest computes it. It is read from the modules/NAME.wasm.sha256
// file that scripts/embed-builtins.sh writes next to the module (its digest
// and size), so that a start does not hash the module (66 MB for the
// MutatingAdmissionPolicy). Without that file, or when its size is not the
// module's, the digest is computed once per process.
func Digest(name string) (string, error) {
	// Stat, not Module: reading an embedded file copies it (66 MB).
	st, err := fs.Stat(modules, "modules/"+name+".wasm")
	if err != nil || strings.ContainsAny(name, "/\\.") {
		_, err := Module(name) // its error
		return "", err
	}
	if d, ok := embeddedDigest(name, st.Size()); ok {
		return d, nil
	}
	v, _ := computed.LoadOrStore(name, sync.OnceValues(func() (string, error) {
		b, err := Module(name)
		if err != nil {
			return "", err
		}
		return digestOf(b), nil
	}))
	return v.(func() (string, error))()
}

// computed holds, by module name, the digests computed in this process.
var computed sync.Map // string -> func() (string, error)

// embeddedDigest reads modules/NAME.wasm.sha256: "sha256:<64 hex> <size>".
func embeddedDigest(name string, size int64) (string, bool) {
	f, err := modules.ReadFile("modules/" + name + ".wasm.sha256")
	if err != nil {
		return "", false
	}
	d, n, ok := strings.Cut(strings.TrimSpace(string(f)), " ")
	hexPart, isSHA := strings.CutPrefix(d, "sha256:")
	if !ok || !isSHA || len(hexPart) != 64 || strconv.FormatInt(size, 10) != n {
		return "", false
	}
	if _, err := hex.DecodeString(hexPart); err != nil || strings.ToLower(hexPart) != hexPart {
		return "", false
	}
	return d, true
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
