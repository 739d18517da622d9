package wasm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// The load cache keeps, for every instrumented module, what a later load
// needs to start it without decoding, instrumenting and validating its code
// again (RATIONALE.md, "Why does a warm load compile a stub?"):
//
//	<cache-dir>/tollgate-load-v1-i<N>/<sha256 hex of the module as given>/
//	    stub.wasm                                 header + wasmbin.Stub of the instrumented module
//	    wazero-<version>-<arch>-<os>/<key>        wazero's compiled code of the instrumented module
//	    wazero-<version>-<arch>-<os>/<stub key>   a hard link to it, under the stub's key
//
// N is wasmbin.InstrumentVersion, so that a host whose instrumentation
// changed never reads what an older one wrote.
func loadCacheDirName() string {
	return "tollgate-load-v1-i" + strconv.Itoa(wasmbin.InstrumentVersion)
}

const stubFileName = "stub.wasm"

// stubMagic starts every stub file.
const stubMagic = "tgstub\x00\x01"

// stubHeaderLen is the size of a stub file's header: magic, crc32c
// (Castagnoli) of the module, module length (uint64, little endian).
const stubHeaderLen = len(stubMagic) + 4 + 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// linkSeq numbers the temporary names of linkCompiled.
var linkSeq atomic.Uint64

type loadCache struct {
	root string // "" when the cache is disabled
}

func newLoadCache(cacheDir string) loadCache {
	if cacheDir == "" {
		return loadCache{}
	}
	return loadCache{root: filepath.Join(cacheDir, loadCacheDirName())}
}

func (c loadCache) enabled() bool { return c.root != "" }

// moduleDir is the directory of the module with this digest ("sha256:<hex>",
// computed or checked by Engine.Compile).
func (c loadCache) moduleDir(digest string) string {
	return filepath.Join(c.root, strings.TrimPrefix(digest, "sha256:"))
}

// getStub reads the stub of a module directory. It returns an error wrapping
// fs.ErrNotExist on a plain miss, and another error for a file that is there
// but unusable (truncated, wrong format, checksum mismatch).
func getStub(dir string) ([]byte, error) {
	p := filepath.Join(dir, stubFileName)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	stub, err := decodeStub(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return stub, nil
}

func decodeStub(b []byte) ([]byte, error) {
	if len(b) < stubHeaderLen || string(b[:len(stubMagic)]) != stubMagic {
		return nil, errors.New("not a tollgate stub file (bad header)")
	}
	h := b[len(stubMagic):stubHeaderLen]
	sum := binary.LittleEndian.Uint32(h[:4])
	size := binary.LittleEndian.Uint64(h[4:12])
	mod := b[stubHeaderLen:]
	if uint64(len(mod)) != size {
		return nil, fmt.Errorf("the header says %d bytes of module, the file has %d", size, len(mod))
	}
	if got := crc32.Checksum(mod, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum mismatch (crc32c %08x, header %08x)", got, sum)
	}
	if err := wasmbin.Check(mod); err != nil {
		return nil, err
	}
	return mod, nil
}

// putStub writes the stub of a module directory: to a temporary file in the
// same directory, renamed, so that a reader never sees a partial file.
func putStub(dir string, stub []byte) error {
	var h [stubHeaderLen]byte
	copy(h[:], stubMagic)
	binary.LittleEndian.PutUint32(h[len(stubMagic):], crc32.Checksum(stub, castagnoli))
	binary.LittleEndian.PutUint64(h[len(stubMagic)+4:], uint64(len(stub)))
	return writeAtomic(filepath.Join(dir, stubFileName), h[:], stub)
}

func writeAtomic(path string, parts ...[]byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	for _, p := range parts {
		if _, err = f.Write(p); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// removeEmptyDirs removes dir if it holds nothing but the empty wazero
// directories wazero.NewCompilationCacheWithDir makes; it never removes a
// file, nor what another load of the module (a probe directory) is using.
func removeEmptyDirs(dir string) {
	if subs, err := os.ReadDir(dir); err == nil {
		for _, s := range subs {
			if s.IsDir() && strings.HasPrefix(s.Name(), "wazero-") {
				_ = os.Remove(filepath.Join(dir, s.Name()))
			}
		}
	}
	_ = os.Remove(dir)
}

// removeStub deletes the stub of a module directory, ignoring errors.
func removeStub(dir string) { _ = os.Remove(filepath.Join(dir, stubFileName)) }

// screenedName marks a module directory whose module passed Screen as of
// ScreenVersion, with the given limits: a warm load from its stub then
// skips Screen. Limits other than the defaults are part of the name (a
// hash of them), so that a module screened under higher limits is screened
// again under lower ones.
func screenedName(l Limits) string {
	name := "screened-v" + strconv.Itoa(ScreenVersion)
	if l = l.WithDefaults(); l != wasmbin.DefaultLimits() {
		h := sha256.Sum256(fmt.Appendf(nil, "%+v", l))
		name += "-" + hex.EncodeToString(h[:6])
	}
	return name
}

func screenedBy(dir string, l Limits) bool {
	_, err := os.Stat(filepath.Join(dir, screenedName(l)))
	return err == nil
}

func markScreened(dir string, l Limits, logger *slog.Logger) {
	if err := writeAtomic(filepath.Join(dir, screenedName(l))); err != nil {
		logger.Debug("cannot mark the module screened in the load cache; the next load screens it again", "dir", dir, "error", err)
	}
}

// isHex64 reports whether s is 64 lower-case hex digits: the hex of a
// sha256 digest, and the name of every entry of wazero's compilation cache.
func isHex64(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// onlyCacheEntry returns the path, relative to dir, of the single entry of
// the wazero compilation cache in dir (wazero-<version>-<arch>-<os>/<key>).
func onlyCacheEntry(dir string) (string, error) {
	subs, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var found []string
	for _, s := range subs {
		if !s.IsDir() || !strings.HasPrefix(s.Name(), "wazero-") {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, s.Name()))
		if err != nil {
			return "", err
		}
		for _, f := range files {
			if isHex64(f.Name()) {
				found = append(found, filepath.Join(s.Name(), f.Name()))
			}
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%s holds %d compiled modules, want 1", dir, len(found))
	}
	return found[0], nil
}

// linkCompiled makes the compiled code of the instrumented module, the one
// cache entry in dir's wazero directory other than the stub's (stubEntry,
// relative to dir), available under the stub's key as well.
func linkCompiled(dir, stubEntry string) error {
	sub := filepath.Join(dir, filepath.Dir(stubEntry))
	stubKey := filepath.Base(stubEntry)
	files, err := os.ReadDir(sub)
	if err != nil {
		return err
	}
	var real []string
	for _, f := range files {
		if isHex64(f.Name()) && f.Name() != stubKey {
			real = append(real, f.Name())
		}
	}
	if len(real) != 1 {
		return fmt.Errorf("%s holds %d compiled modules besides the stub's, want 1", sub, len(real))
	}
	src, dst := filepath.Join(sub, real[0]), filepath.Join(sub, stubKey)
	// A name of its own: another load of the same module may be here too.
	tmp := filepath.Join(sub, fmt.Sprintf(".tmp-link-%d-%d", os.Getpid(), linkSeq.Add(1)))
	if err := os.Link(src, tmp); err != nil {
		// No hard links on this file system: copy.
		if err := copyFile(src, tmp); err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	err = os.Rename(tmp, dst)
	// When another load linked dst first, tmp and dst are links to the same
	// file and rename(2) succeeds without doing anything: tmp stays. It is
	// gone after a rename that moved it, so removing it is always right.
	_ = os.Remove(tmp)
	return err
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
