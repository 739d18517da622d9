package wasmenc

import (
	"bytes"
	"math"
	"testing"
)

// TestULEB128: values round-trip with the encoding the specification gives
// (its examples), and a truncated or over-long integer is an error.
func TestULEB128(t *testing.T) {
	for _, c := range []struct {
		v   uint64
		enc []byte
	}{
		{0, []byte{0x00}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 0x01}},
		{624485, []byte{0xe5, 0x8e, 0x26}},
		{math.MaxUint64, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		if got := AppendULEB128([]byte{9}, c.v); !bytes.Equal(got, append([]byte{9}, c.enc...)) {
			t.Errorf("AppendULEB128(%d) = % x, want 09 % x", c.v, got, c.enc)
		}
		v, n, err := ReadULEB128(append(c.enc, 0xaa))
		if err != nil || v != c.v || n != len(c.enc) {
			t.Errorf("ReadULEB128(% x) = %d, %d, %v", c.enc, v, n, err)
		}
	}
	for _, bad := range [][]byte{nil, {0x80}, bytes.Repeat([]byte{0x80}, 11)} {
		if _, _, err := ReadULEB128(bad); err == nil {
			t.Errorf("ReadULEB128(% x): no error", bad)
		}
	}
}

// TestNameVectorSection: a name, a vector and a section are written as their
// count or size, then their bytes; a name longer than its input is an error.
func TestNameVectorSection(t *testing.T) {
	b := AppendName(nil, "memory")
	name, rest, err := ReadName(append(b, 7))
	if err != nil || name != "memory" || !bytes.Equal(rest, []byte{7}) {
		t.Fatalf("ReadName = %q, % x, %v", name, rest, err)
	}
	if _, _, err := ReadName([]byte{5, 'a'}); err == nil {
		t.Fatal("ReadName of a name overrunning its input: no error")
	}
	if got := AppendVector(nil, []byte{1}, []byte{2, 3}); !bytes.Equal(got, []byte{2, 1, 2, 3}) {
		t.Fatalf("AppendVector = % x", got)
	}
	payload := bytes.Repeat([]byte{0xab}, 200)
	got := AppendSection(Magic[:8:8], 10, payload)
	want := append(append(append([]byte{}, Magic...), 10, 0xc8, 0x01), payload...)
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendSection: % x", got[:12])
	}
}
