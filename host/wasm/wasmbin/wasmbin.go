package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
)

// Magic is the first eight bytes of every WebAssembly 1.0 binary (magic + version).
var Magic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

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
		size, n, err := uleb(b[off:])
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
			name, rest, err := readName(s.Payload)
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
	body := appendUleb(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, payload...)
	return appendSection(out, sectionCustom, body), nil
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
		count, n, err := uleb(p)
		if err != nil {
			return nil, fmt.Errorf("%w: export section: %v", ErrMalformed, err)
		}
		p = p[n:]
		for i := uint64(0); i < count; i++ {
			name, rest, err := readName(p)
			if err != nil || len(rest) < 1 {
				return nil, fmt.Errorf("%w: export %d: truncated", ErrMalformed, i)
			}
			kind := rest[0]
			_, n, err := uleb(rest[1:])
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

func readName(b []byte) (string, []byte, error) {
	l, n, err := uleb(b)
	if err != nil {
		return "", nil, err
	}
	if l > uint64(len(b)-n) {
		return "", nil, fmt.Errorf("name of %d bytes overruns its section", l)
	}
	return string(b[n : n+int(l)]), b[n+int(l):], nil
}

func uleb(b []byte) (uint64, int, error) {
	var v uint64
	var shift uint
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
		shift += 7
	}
	return 0, 0, errors.New("truncated LEB128 integer")
}

func appendUleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// appendSection appends a section: id, payload size, payload.
func appendSection(out []byte, id byte, payload []byte) []byte {
	out = append(out, id)
	out = appendUleb(out, uint64(len(payload)))
	return append(out, payload...)
}
