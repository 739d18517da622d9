package oci

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Save writes the stored modules named by uris to w as a tar of an OCI
// image layout (oci-layout, index.json, blobs/sha256/…): the same layout as
// the store, restricted to those modules. Load reads it back; other OCI
// tools can read it as an oci-archive.
func (s *Store) Save(w io.Writer, uris ...string) error {
	if len(uris) == 0 {
		return fmt.Errorf("save: no URI given")
	}
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	out := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	var blobs []ocispec.Descriptor
	seen := map[digest.Digest]bool{}
	for _, uri := range uris {
		ref, err := ParseURI(uri)
		if err != nil {
			return err
		}
		var found *ocispec.Descriptor
		for i := range idx.Manifests {
			if idx.Manifests[i].Annotations[annotationRefName] == ref.Name() {
				found = &idx.Manifests[i]
			}
		}
		if found == nil {
			return fmt.Errorf("%w: save %s: pull it first (store %s)", ErrNotInStore, ref, s.root)
		}
		out.Manifests = append(out.Manifests, *found)
		m, _, err := s.readManifest(found.Digest)
		if err != nil {
			return err
		}
		for _, d := range append([]ocispec.Descriptor{{Digest: found.Digest, Size: found.Size}, m.Config}, m.Layers...) {
			if d.Digest != "" && !seen[d.Digest] {
				seen[d.Digest] = true
				blobs = append(blobs, d)
			}
		}
	}
	tw := tar.NewWriter(w)
	now := time.Now().UTC().Truncate(time.Second)
	writeBytes := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	layout, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err := writeBytes(ocispec.ImageLayoutFile, layout); err != nil {
		return err
	}
	for _, d := range blobs {
		f, err := os.Open(s.BlobPath(d.Digest))
		if err != nil {
			return fmt.Errorf("save: blob %s: %w", d.Digest, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		hdr := &tar.Header{Name: "blobs/sha256/" + d.Digest.Encoded(), Mode: 0o644, Size: fi.Size(), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	ib, _ := json.MarshalIndent(out, "", "  ")
	if err := writeBytes(ocispec.ImageIndexFile, ib); err != nil {
		return err
	}
	return tw.Close()
}

// Load imports a bundle written by Save (or any tar of an OCI image layout
// whose index names manifests of single-layer Wasm modules) into the
// store. Every blob is verified against its file name's digest; blobs over
// maxBlob bytes are refused. It returns the entries added.
func (s *Store) Load(r io.Reader, maxBlob int64) ([]StoreEntry, error) {
	if maxBlob <= 0 {
		maxBlob = DefaultMaxModuleSize
	}
	tr := tar.NewReader(r)
	var idx *ocispec.Index
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidBundle, err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if hdr.Typeflag == tar.TypeDir || name == "blobs" || name == "blobs/sha256" || name == "." {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: entry %q is not a regular file", ErrInvalidBundle, hdr.Name)
		}
		switch {
		case name == ocispec.ImageLayoutFile:
			continue
		case name == ocispec.ImageIndexFile:
			if hdr.Size > maxManifestSize {
				return nil, fmt.Errorf("%w: index.json is %d bytes", ErrInvalidBundle, hdr.Size)
			}
			idx = &ocispec.Index{}
			if err := json.NewDecoder(io.LimitReader(tr, maxManifestSize)).Decode(idx); err != nil {
				return nil, fmt.Errorf("%w: index.json: %v", ErrInvalidBundle, err)
			}
		case strings.HasPrefix(name, "blobs/sha256/"):
			d := digest.NewDigestFromEncoded(digest.SHA256, strings.TrimPrefix(name, "blobs/sha256/"))
			if err := d.Validate(); err != nil {
				return nil, fmt.Errorf("%w: entry %q: not a sha256 blob name", ErrInvalidBundle, hdr.Name)
			}
			if hdr.Size > maxBlob {
				return nil, fmt.Errorf("%w: bundle blob %s is %d bytes, limit %d", ErrTooLarge, d, hdr.Size, maxBlob)
			}
			if err := s.writeBlob(ocispec.Descriptor{Digest: d, Size: hdr.Size}, tr); err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
		default:
			return nil, fmt.Errorf("%w: unexpected entry %q", ErrInvalidBundle, hdr.Name)
		}
	}
	if idx == nil {
		return nil, fmt.Errorf("%w: no index.json", ErrInvalidBundle)
	}
	var added []StoreEntry
	for i, d := range idx.Manifests {
		name := d.Annotations[annotationRefName]
		ref, err := ParseURI(Scheme + name)
		if err != nil {
			return added, fmt.Errorf("%w: index.json manifests[%d]: ref name %q: %v", ErrInvalidBundle, i, name, err)
		}
		m, _, err := s.readManifest(d.Digest)
		if err != nil {
			return added, fmt.Errorf("%w: index.json manifests[%d] (%s): %v", ErrInvalidBundle, i, name, err)
		}
		layer, err := wasmLayer(m, ref.String(), maxBlob)
		if err != nil {
			return added, err
		}
		title := d.Annotations[annotationTitle]
		if title == "" {
			title = moduleTitle(m.Annotations)
		}
		if d.MediaType == "" {
			d.MediaType = ocispec.MediaTypeImageManifest
		}
		if err := s.add(ref.Name(), d, layer, title); err != nil {
			return added, err
		}
		e, err := s.Lookup(ref.String())
		if err != nil {
			return added, err
		}
		added = append(added, e)
	}
	return added, nil
}
