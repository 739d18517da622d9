package kubelet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// dataDirName and tmpDataDirName are kubelet's AtomicWriter's names
// (pkg/volume/util/atomic_writer.go): the visible files are symlinks through ..data, which points
// at a timestamped directory holding the payload.
const (
	dataDirName    = "..data"
	tmpDataDirName = "..data_tmp"
)

// writeAtomic makes dir hold exactly payload (relative path -> content) the way kubelet's
// AtomicWriter does: the payload goes to a new "..<timestamp>.<random>" directory, a "..data_tmp"
// symlink to it is renamed over "..data", a "<first path element>" symlink to "..data/<element>" is
// made for each new top-level entry and removed for each gone one, and the old timestamped
// directory is removed. It returns whether anything changed (an identical payload is not
// rewritten, as kubelet does not).
func writeAtomic(dir string, payload map[string][]byte, mode os.FileMode) (bool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	oldTS, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if oldTS != "" && samePayload(filepath.Join(dir, oldTS), payload) {
		return false, nil
	}
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return false, err
	}
	for rel, data := range payload {
		p := filepath.Join(tsDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return false, err
		}
	}
	tmpLink := filepath.Join(dir, tmpDataDirName)
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		return false, err
	}
	// User-visible names: one symlink per top-level path element.
	want := map[string]bool{}
	for rel := range payload {
		first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		want[first] = true
	}
	for name := range want {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), link); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || want[name] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return false, err
		}
	}
	if oldTS != "" && oldTS != filepath.Base(tsDir) {
		if err := os.RemoveAll(filepath.Join(dir, oldTS)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// samePayload reports whether tsDir holds exactly payload.
func samePayload(tsDir string, payload map[string][]byte) bool {
	var have []string
	err := filepath.WalkDir(tsDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(tsDir, p)
		if err != nil {
			return err
		}
		have = append(have, rel)
		return nil
	})
	if err != nil || len(have) != len(payload) {
		return false
	}
	sort.Strings(have)
	for _, rel := range have {
		want, ok := payload[rel]
		if !ok {
			return false
		}
		got, err := os.ReadFile(filepath.Join(tsDir, rel))
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	return true
}

// payloadDigest is a cheap identity of a payload, to notice changes without touching the disk.
func payloadDigest(payload map[string][]byte) string {
	keys := make([]string, 0, len(payload))
	for k := range payload {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%q:%d:%x;", k, len(payload[k]), fnv64(payload[k]))
	}
	return b.String()
}

func fnv64(data []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range data {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
