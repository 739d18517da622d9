package wasmenc

import (
	"errors"
	"fmt"
)

// Magic is the first eight bytes of every WebAssembly 1.0 binary: the magic
// `\0asm` and version 1.
var Magic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// AppendULEB128 appends v as an unsigned LEB128 integer.
func AppendULEB128(b []byte, v uint64) []byte {
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

// ReadULEB128 reads an unsigned LEB128 integer of at most 10 bytes from the
// start of b: its value and how many bytes it took.
func ReadULEB128(b []byte) (v uint64, n int, err error) {
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

// AppendName appends a name: its length in bytes, then its bytes.
func AppendName(b []byte, name string) []byte {
	b = AppendULEB128(b, uint64(len(name)))
	return append(b, name...)
}

// ReadName reads a name (its length, then its bytes) from the start of b and
// returns the rest.
func ReadName(b []byte) (name string, rest []byte, err error) {
	l, n, err := ReadULEB128(b)
	if err != nil {
		return "", nil, err
	}
	if l > uint64(len(b)-n) {
		return "", nil, fmt.Errorf("name of %d bytes overruns its section", l)
	}
	return string(b[n : n+int(l)]), b[n+int(l):], nil
}

// AppendVector appends a vector: the number of items, then each item's bytes.
func AppendVector(b []byte, items ...[]byte) []byte {
	b = AppendULEB128(b, uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

// AppendSection appends a section: id, payload size, payload.
func AppendSection(out []byte, id byte, payload []byte) []byte {
	out = append(out, id)
	out = AppendULEB128(out, uint64(len(payload)))
	return append(out, payload...)
}
