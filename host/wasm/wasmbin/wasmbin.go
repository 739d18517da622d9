package wasmbin

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

// Magic is the first eight bytes of every WebAssembly 1.0 binary (magic + version).
var Magic = wasmenc.Magic

// ErrNotWasm is returned for input that is not a WebAssembly binary.
var ErrNotWasm = errors.New("not a WebAssembly module")

// ErrMalformed is returned when the section structure cannot be read.
var ErrMalformed = errors.New("malformed WebAssembly module")

const (
	sectionCustom = 0
	sectionExport = 7
)

// Section is one section of a module.
type Section struct {
	ID byte
	// Name is set for custom sections.
	Name string
	// Start and End delimit the whole section (id byte to the end of its payload).
	Start, End int
	// Payload is the section content (for custom sections, after the name).
	Payload []byte
}

// Export is one entry of the export section.
type Export struct {
	Name string
	Kind byte // 0 func, 1 table, 2 memory, 3 global, 4 tag
}

// ExportKindFunc is the export kind of a function.
const ExportKindFunc = 0

// Check reports ErrNotWasm unless b starts with the WebAssembly 1.0 header.
func Check(b []byte) error {
	if len(b) < len(Magic) || !bytes.Equal(b[:4], Magic[:4]) {
		return fmt.Errorf("%w: the file does not start with the \\0asm header", ErrNotWasm)
	}
	if !bytes.Equal(b[4:8], Magic[4:8]) {
		return fmt.Errorf("%w: unsupported binary version %x (want 1)", ErrNotWasm, b[4:8])
	}
	return nil
}

// Sections lists the sections of a module in order.
func Sections(b []byte) ([]Section, error) {
	if err := Check(b); err != nil {
		return nil, err
	}
	var out []Section
	off := len(Magic)
	for off < len(b) {
		start := off
		id := b[off]
		off++
		size, n, err := wasmenc.ReadULEB128(b[off:])
		if err != nil {
			return nil, fmt.Errorf("%w: section at byte %d: %v", ErrMalformed, start, err)
		}
		off += n
		end := off + int(size)
		if size > uint64(len(b)) || end > len(b) {
			return nil, fmt.Errorf("%w: section at byte %d claims %d bytes, only %d remain", ErrMalformed, start, size, len(b)-off)
		}
		s := Section{ID: id, Start: start, End: end, Payload: b[off:end]}
		if id == sectionCustom {
			name, rest, err := wasmenc.ReadName(s.Payload)
			if err != nil {
				return nil, fmt.Errorf("%w: custom section at byte %d: %v", ErrMalformed, start, err)
			}
			s.Name, s.Payload = name, rest
		}
		out = append(out, s)
		off = end
	}
	return out, nil
}

// CustomSection returns the payload of the first custom section called name,
// or nil and false when there is none.
func CustomSection(b []byte, name string) ([]byte, bool, error) {
	secs, err := Sections(b)
	if err != nil {
		return nil, false, err
	}
	for _, s := range secs {
		if s.ID == sectionCustom && s.Name == name {
			return s.Payload, true, nil
		}
	}
	return nil, false, nil
}

// SetCustomSection returns a copy of b in which every custom section called
// name is removed and one with the given payload is appended.
func SetCustomSection(b []byte, name string, payload []byte) ([]byte, error) {
	secs, err := Sections(b)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(payload)+len(name)+16)
	out = append(out, b[:len(Magic)]...)
	for _, s := range secs {
		if s.ID == sectionCustom && s.Name == name {
			continue
		}
		out = append(out, b[s.Start:s.End]...)
	}
	body := wasmenc.AppendULEB128(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, payload...)
	return wasmenc.AppendSection(out, sectionCustom, body), nil
}

// Exports lists the module's exports.
func Exports(b []byte) ([]Export, error) {
	secs, err := Sections(b)
	if err != nil {
		return nil, err
	}
	var out []Export
	for _, s := range secs {
		if s.ID != sectionExport {
			continue
		}
		p := s.Payload
		count, n, err := wasmenc.ReadULEB128(p)
		if err != nil {
			return nil, fmt.Errorf("%w: export section: %v", ErrMalformed, err)
		}
		p = p[n:]
		for i := uint64(0); i < count; i++ {
			name, rest, err := wasmenc.ReadName(p)
			if err != nil || len(rest) < 1 {
				return nil, fmt.Errorf("%w: export %d: truncated", ErrMalformed, i)
			}
			kind := rest[0]
			_, n, err := wasmenc.ReadULEB128(rest[1:])
			if err != nil {
				return nil, fmt.Errorf("%w: export %q: %v", ErrMalformed, name, err)
			}
			out = append(out, Export{Name: name, Kind: kind})
			p = rest[1+n:]
		}
	}
	return out, nil
}

// HasFuncExport reports whether the module exports a function called name.
func HasFuncExport(exports []Export, name string) bool {
	for _, e := range exports {
		if e.Kind == ExportKindFunc && e.Name == name {
			return true
		}
	}
	return false
}
