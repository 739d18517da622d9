package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// Annotations tollgate adds to the store's index.json descriptors.
const (
	annotationModuleDigest = "io.tollgate.module.digest"
	annotationModuleSize   = "io.tollgate.module.size"
	annotationModuleType   = "io.tollgate.module.mediaType"
	annotationPulled       = "io.tollgate.pulled"
	annotationTitle        = ocispec.AnnotationTitle
	annotationRefName      = ocispec.AnnotationRefName
)

// maxManifestSize bounds manifests and config blobs, which are small JSON.
const maxManifestSize = 4 << 20

// DefaultStorePath is $XDG_CACHE_HOME/tollgate/store (os.UserCacheDir).
func DefaultStorePath() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tollgate", "store")
	}
	return filepath.Join(dir, "tollgate", "store")
}

// Store is the local policy store: an OCI image layout directory
// (oci-layout, index.json, blobs/sha256/<hex>) holding, for every pulled
// module, its manifest, config and Wasm layer, content-addressed by digest.
// index.json names each pulled manifest by its reference (host/repo:tag) in
// org.opencontainers.image.ref.name, so any OCI-layout tool can read it.
//
// Blobs are written to a temporary file in the store, verified against
// their digest and size, then renamed into place: a reader never sees a
// partial blob and an interrupted write leaves nothing behind. index.json
// is replaced the same way, under an exclusive file lock.
type Store struct {
	root string
}

// StoreEntry is one module in the store.
type StoreEntry struct {
	// URI is the registry:// URI it was pulled as.
	URI string `json:"uri"`
	// Digest is the manifest digest (what registry://...@sha256: pins).
	Digest string `json:"digest"`
	// ModuleDigest is the digest of the Wasm layer.
	ModuleDigest string `json:"moduleDigest"`
	// Size is the size of the Wasm module in bytes.
	Size int64 `json:"size"`
	// Title is io.kubewarden.policy.title (or org.opencontainers.image.title).
	Title string `json:"title,omitempty"`
	// MediaType is the Wasm layer's media type.
	MediaType string `json:"mediaType"`
	// PulledAt is when it was stored.
	PulledAt time.Time `json:"pulledAt"`
	// Path is the Wasm file inside the store.
	Path string `json:"path"`
}

// OpenStore opens (creating if needed) the store at root; "" means DefaultStorePath.
func OpenStore(root string) (*Store, error) {
	if root == "" {
		root = DefaultStorePath()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", root, err)
	}
	s := &Store{root: abs}
	for _, d := range []string{s.root, filepath.Join(s.root, "blobs", "sha256"), s.ingestDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("store %s: %w", root, err)
		}
	}
	s.cleanIngest(staleIngest)
	layout := filepath.Join(s.root, ocispec.ImageLayoutFile)
	if _, err := os.Stat(layout); errors.Is(err, fs.ErrNotExist) {
		b, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
		if err := writeFileAtomic(layout, b, s.ingestDir()); err != nil {
			return nil, fmt.Errorf("store %s: %w", root, err)
		}
	}
	return s, nil
}

// staleIngest is how long a temporary file may go unmodified before it is
// taken for the leftover of a killed process. A live download writes to its
// file continuously.
const staleIngest = 10 * time.Minute

// cleanIngest removes temporary files that no download has touched for age.
func (s *Store) cleanIngest(age time.Duration) {
	ents, err := os.ReadDir(s.ingestDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > age {
			_ = os.Remove(filepath.Join(s.ingestDir(), e.Name()))
		}
	}
}

// Root is the store directory.
func (s *Store) Root() string { return s.root }

func (s *Store) ingestDir() string { return filepath.Join(s.root, "ingest") }

// BlobPath is where a blob with digest d lives (it may not exist).
func (s *Store) BlobPath(d digest.Digest) string {
	return filepath.Join(s.root, "blobs", d.Algorithm().String(), d.Encoded())
}

// hasBlob reports whether a blob exists with the expected size.
func (s *Store) hasBlob(d digest.Digest, size int64) bool {
	if d.Validate() != nil {
		return false
	}
	fi, err := os.Stat(s.BlobPath(d))
	return err == nil && fi.Mode().IsRegular() && (size < 0 || fi.Size() == size)
}

// hasValidBlob reports whether a blob exists with the expected size and
// content: a stored blob that does not hash to its digest (a disk error, a
// hand edit) does not count, so that a pull fetches it again and replaces
// it. It reads the whole blob.
func (s *Store) hasValidBlob(desc ocispec.Descriptor) bool {
	if !s.hasBlob(desc.Digest, desc.Size) {
		return false
	}
	f, err := os.Open(s.BlobPath(desc.Digest))
	if err != nil {
		return false
	}
	defer f.Close()
	v := desc.Digest.Verifier()
	if _, err := io.Copy(v, f); err != nil {
		return false
	}
	return v.Verified()
}

// writeBlob copies r into the store as blob desc, verifying size and digest;
// a stored blob of that digest whose content does not match it is replaced.
// Nothing is left in blobs/ unless the content matched.
func (s *Store) writeBlob(desc ocispec.Descriptor, r io.Reader) error {
	if err := desc.Digest.Validate(); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrDigestMismatch, desc.Digest, err)
	}
	if s.hasValidBlob(desc) {
		return nil
	}
	f, err := os.CreateTemp(s.ingestDir(), "blob-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if tmp != "" {
			f.Close()
			os.Remove(tmp)
		}
	}()
	vr := content.NewVerifyReader(r, desc)
	if _, err := io.Copy(f, vr); err != nil {
		return mapVerifyErr(desc, err)
	}
	if err := vr.Verify(); err != nil {
		return mapVerifyErr(desc, err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.BlobPath(desc.Digest)); err != nil {
		return err
	}
	tmp = ""
	return nil
}

func mapVerifyErr(desc ocispec.Descriptor, err error) error {
	switch {
	case errors.Is(err, content.ErrMismatchedDigest):
		return fmt.Errorf("%w: content of %s does not hash to its digest", ErrDigestMismatch, desc.Digest)
	case errors.Is(err, content.ErrTrailingData):
		return fmt.Errorf("%w: %s: more than the %d bytes announced", ErrDigestMismatch, desc.Digest, desc.Size)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %s: fewer than the %d bytes announced arrived: %v", ErrIncomplete, desc.Digest, desc.Size, err)
	}
	return err
}

// readBlob reads a stored blob, verifying it against desc.
func (s *Store) readBlob(desc ocispec.Descriptor) ([]byte, error) {
	f, err := os.Open(s.BlobPath(desc.Digest))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: blob %s", ErrNotInStore, desc.Digest)
		}
		return nil, err
	}
	defer f.Close()
	if desc.Size < 0 {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		desc.Size = fi.Size()
	}
	b, err := content.ReadAll(f, desc)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.root, mapVerifyErr(desc, err))
	}
	return b, nil
}

// readManifest reads and parses a stored manifest.
func (s *Store) readManifest(d digest.Digest) (ocispec.Manifest, []byte, error) {
	raw, err := s.readBlob(ocispec.Descriptor{Digest: d, Size: -1})
	if err != nil {
		return ocispec.Manifest{}, nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return ocispec.Manifest{}, nil, fmt.Errorf("store %s: manifest %s: %w", s.root, d, err)
	}
	return m, raw, nil
}

// indexPath is the store's index.json.
func (s *Store) indexPath() string { return filepath.Join(s.root, ocispec.ImageIndexFile) }

func (s *Store) readIndex() (ocispec.Index, error) {
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	b, err := os.ReadFile(s.indexPath())
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("store %s: index.json: %w", s.root, err)
	}
	return idx, nil
}

func (s *Store) writeIndex(idx ocispec.Index) error {
	if idx.Manifests == nil {
		idx.Manifests = []ocispec.Descriptor{}
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.indexPath(), b, s.ingestDir())
}

// updateIndex runs fn on the index under the store lock and writes the result.
func (s *Store) updateIndex(fn func(*ocispec.Index) error) error {
	unlock, err := lockFile(filepath.Join(s.root, ".lock"))
	if err != nil {
		return fmt.Errorf("store %s: lock: %w", s.root, err)
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := fn(&idx); err != nil {
		return err
	}
	return s.writeIndex(idx)
}

// add records manifest (already stored with its blobs) under name.
func (s *Store) add(name string, manifest ocispec.Descriptor, layer ocispec.Descriptor, title string) error {
	return s.updateIndex(func(idx *ocispec.Index) error {
		m, _, err := s.readManifest(manifest.Digest)
		if err != nil {
			return fmt.Errorf("store %s: %s was removed while being added, retry: %w", s.root, name, err)
		}
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if !s.hasBlob(d.Digest, d.Size) {
				return fmt.Errorf("store %s: blob %s of %s was removed while being added, retry", s.root, d.Digest, name)
			}
		}
		desc := ocispec.Descriptor{
			MediaType: manifest.MediaType,
			Digest:    manifest.Digest,
			Size:      manifest.Size,
			Annotations: map[string]string{
				annotationRefName:      name,
				annotationModuleDigest: layer.Digest.String(),
				annotationModuleSize:   strconv.FormatInt(layer.Size, 10),
				annotationModuleType:   layer.MediaType,
				annotationPulled:       time.Now().UTC().Format(time.RFC3339),
			},
		}
		if title != "" {
			desc.Annotations[annotationTitle] = title
		}
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
			return d.Annotations[annotationRefName] == name
		})
		idx.Manifests = append(idx.Manifests, desc)
		slices.SortFunc(idx.Manifests, func(a, b ocispec.Descriptor) int {
			return strings.Compare(a.Annotations[annotationRefName], b.Annotations[annotationRefName])
		})
		return nil
	})
}

func (s *Store) entry(d ocispec.Descriptor) StoreEntry {
	size, _ := strconv.ParseInt(d.Annotations[annotationModuleSize], 10, 64)
	pulled, _ := time.Parse(time.RFC3339, d.Annotations[annotationPulled])
	e := StoreEntry{
		URI:          Scheme + d.Annotations[annotationRefName],
		Digest:       d.Digest.String(),
		ModuleDigest: d.Annotations[annotationModuleDigest],
		Size:         size,
		Title:        d.Annotations[annotationTitle],
		MediaType:    d.Annotations[annotationModuleType],
		PulledAt:     pulled,
	}
	if md, err := digest.Parse(e.ModuleDigest); err == nil {
		e.Path = s.BlobPath(md)
	}
	return e
}

// List returns every module in the store, sorted by URI.
func (s *Store) List() ([]StoreEntry, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	out := make([]StoreEntry, 0, len(idx.Manifests))
	for _, d := range idx.Manifests {
		if d.Annotations[annotationRefName] == "" {
			continue
		}
		out = append(out, s.entry(d))
	}
	return out, nil
}

// Lookup finds the entry for a registry:// URI.
func (s *Store) Lookup(uri string) (StoreEntry, error) {
	ref, err := ParseURI(uri)
	if err != nil {
		return StoreEntry{}, err
	}
	entries, err := s.List()
	if err != nil {
		return StoreEntry{}, err
	}
	for _, e := range entries {
		if e.URI == ref.String() {
			return e, nil
		}
	}
	return StoreEntry{}, fmt.Errorf("%w: %s (store %s)", ErrNotInStore, ref, s.root)
}

// moduleByDigest returns the Wasm bytes and layer descriptor of a stored
// manifest, verifying every blob it reads; ErrNotInStore when incomplete.
func (s *Store) moduleByDigest(manifest digest.Digest, maxSize int64) ([]byte, ocispec.Descriptor, error) {
	m, _, err := s.readManifest(manifest)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	layer, err := wasmLayer(m, manifest.String(), maxSize)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	wasm, err := s.readBlob(layer)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	return wasm, layer, nil
}

// Remove deletes the entries whose URI is uriOrDigest, or whose manifest or
// module digest is uriOrDigest, then deletes blobs no entry references.
// It returns the removed entries; ErrNotInStore when none matched.
func (s *Store) Remove(uriOrDigest string) ([]StoreEntry, error) {
	match := func(d ocispec.Descriptor) bool { return false }
	switch {
	case IsRegistryURI(uriOrDigest):
		ref, err := ParseURI(uriOrDigest)
		if err != nil {
			return nil, err
		}
		match = func(d ocispec.Descriptor) bool { return d.Annotations[annotationRefName] == ref.Name() }
	case strings.HasPrefix(uriOrDigest, "sha256:"):
		if _, err := digest.Parse(uriOrDigest); err != nil {
			return nil, fmt.Errorf("%w: %q is not a sha256 digest: %v", ErrMalformedReference, uriOrDigest, err)
		}
		match = func(d ocispec.Descriptor) bool {
			return d.Digest.String() == uriOrDigest || d.Annotations[annotationModuleDigest] == uriOrDigest
		}
	default:
		return nil, fmt.Errorf("%w: %q: want a registry:// URI or a sha256: digest", ErrUnknownScheme, uriOrDigest)
	}
	var removed []StoreEntry
	err := s.updateIndex(func(idx *ocispec.Index) error {
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
			if match(d) {
				removed = append(removed, s.entry(d))
				return true
			}
			return false
		})
		if len(removed) == 0 {
			return fmt.Errorf("%w: %s (store %s)", ErrNotInStore, uriOrDigest, s.root)
		}
		return s.gc(*idx)
	})
	return removed, err
}

// gc deletes blobs not referenced by idx; called with the lock held.
func (s *Store) gc(idx ocispec.Index) error {
	keep := map[string]bool{}
	for _, d := range idx.Manifests {
		keep[d.Digest.Encoded()] = true
		if m, _, err := s.readManifest(d.Digest); err == nil {
			keep[m.Config.Digest.Encoded()] = true
			for _, l := range m.Layers {
				keep[l.Digest.Encoded()] = true
			}
		}
	}
	dir := filepath.Join(s.root, "blobs", "sha256")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// writeFileAtomic writes b to path through a temporary file in tmpDir and a rename.
func writeFileAtomic(path string, b []byte, tmpDir string) error {
	f, err := os.CreateTemp(tmpDir, "tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
