package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// instrumentedDirName is the directory, inside the compilation cache
// directory, that keeps modules rewritten by wasmbin.Instrument, one file per
// input digest. Its name carries wasmbin.InstrumentVersion so that a host
// whose instrumentation changed never reads what an older one wrote.
func instrumentedDirName() string {
	return "tollgate-instrumented-v" + strconv.Itoa(wasmbin.InstrumentVersion)
}

// instrumentedMagic starts every instrumented-module cache file.
const instrumentedMagic = "tgimod\x00\x01"

// instrumentedHeaderLen is the size of the header of a cache file: magic,
// crc32c (Castagnoli) of the module, module length (uint64, little endian).
const instrumentedHeaderLen = len(instrumentedMagic) + 4 + 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// instrumentedCache keeps the output of wasmbin.Instrument on disk, keyed by
// the sha256 digest of its input, so that loading a module that was loaded
// before (by this process or an earlier one) does not decode and rewrite its
// whole code section again. A file that cannot be read or fails its checksum
// is a miss: the caller instruments the module again and rewrites the file.
type instrumentedCache struct {
	dir string // "" when the cache is disabled
}

func newInstrumentedCache(cacheDir string) instrumentedCache {
	if cacheDir == "" {
		return instrumentedCache{}
	}
	return instrumentedCache{dir: filepath.Join(cacheDir, instrumentedDirName())}
}

// path is the file for the module with this digest ("sha256:<hex>").
func (c instrumentedCache) path(digest string) (string, error) {
	if err := checkDigest(digest); err != nil {
		return "", err
	}
	return filepath.Join(c.dir, strings.TrimPrefix(digest, "sha256:")), nil
}

// get returns the instrumented module cached for digest. It returns
// fs.ErrNotExist on a plain miss, and another error for a file that is there
// but unusable (truncated, wrong format, checksum mismatch).
func (c instrumentedCache) get(digest string) ([]byte, error) {
	if c.dir == "" {
		return nil, fs.ErrNotExist
	}
	p, err := c.path(digest)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	mod, err := decodeInstrumented(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return mod, nil
}

func decodeInstrumented(b []byte) ([]byte, error) {
	if len(b) < instrumentedHeaderLen || string(b[:len(instrumentedMagic)]) != instrumentedMagic {
		return nil, errors.New("not an instrumented-module cache file (bad header)")
	}
	h := b[len(instrumentedMagic):instrumentedHeaderLen]
	sum := binary.LittleEndian.Uint32(h[:4])
	size := binary.LittleEndian.Uint64(h[4:12])
	mod := b[instrumentedHeaderLen:]
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

// put stores the instrumented module for digest: written to a temporary file
// in the same directory and renamed, so that a reader never sees a partial
// file under the final name.
func (c instrumentedCache) put(digest string, mod []byte) (err error) {
	if c.dir == "" {
		return nil
	}
	p, err := c.path(digest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	var h [instrumentedHeaderLen]byte
	copy(h[:], instrumentedMagic)
	binary.LittleEndian.PutUint32(h[len(instrumentedMagic):], crc32.Checksum(mod, castagnoli))
	binary.LittleEndian.PutUint64(h[len(instrumentedMagic)+4:], uint64(len(mod)))
	if _, err = f.Write(h[:]); err != nil {
		return err
	}
	if _, err = f.Write(mod); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// remove deletes the file cached for digest (a corrupt one), ignoring errors.
func (c instrumentedCache) remove(digest string) {
	if c.dir == "" {
		return
	}
	if p, err := c.path(digest); err == nil {
		_ = os.Remove(p)
	}
}
