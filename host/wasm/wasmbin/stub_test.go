package wasmbin

import (
	"bytes"
	"errors"
	"testing"
)

func TestStub(t *testing.T) {
	body := []byte{1, 1, 0x7f, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b} // a local, loop br 0 end
	in := mod(typeSec, sec(3, 2, 0, 0), memSec, expSec, code(body, []byte{0, 0x0b}), custom("name", 1, 2, 3), custom("after", 9))
	out, err := Stub(in)
	if err != nil {
		t.Fatal(err)
	}
	want := mod(typeSec, sec(3, 2, 0, 0), memSec, expSec, code([]byte{0, 0x00, 0x0b}, []byte{0, 0x00, 0x0b}), custom("name", 1, 2, 3), custom("after", 9))
	if !bytes.Equal(out, want) {
		t.Fatalf("Stub:\n got %x\nwant %x", out, want)
	}
	// A module without code is copied.
	noCode := mod(typeSec, memSec)
	if out, err := Stub(noCode); err != nil || !bytes.Equal(out, noCode) {
		t.Fatalf("Stub without code: %x, %v", out, err)
	}
}

func TestStubRejects(t *testing.T) {
	for name, in := range map[string][]byte{
		"not wasm":        []byte("hello, world"),
		"two code":        mod(typeSec, funcSec, code([]byte{0, 0x0b}), code([]byte{0, 0x0b})),
		"huge count":      mod(typeSec, funcSec, sec(10, 0xff, 0xff, 0xff, 0xff, 0x0f)),
		"truncated count": mod(typeSec, funcSec, sec(10, 0xff)),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Stub(in); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrNotWasm) {
				t.Fatalf("Stub: %v, want ErrMalformed or ErrNotWasm", err)
			}
		})
	}
}

func FuzzStub(f *testing.F) {
	f.Add(module())
	f.Add(mod(typeSec, funcSec, memSec, expSec, code([]byte{0, 0x0b})))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Stub(in)
		if err != nil {
			return
		}
		a, err := Sections(in)
		if err != nil {
			t.Fatalf("Stub accepted a module whose sections do not parse: %v", err)
		}
		b, err := Sections(out)
		if err != nil {
			t.Fatalf("output does not parse: %v", err)
		}
		if len(a) != len(b) {
			t.Fatalf("%d sections in, %d out", len(a), len(b))
		}
		for i := range a {
			if a[i].ID != b[i].ID || a[i].Name != b[i].Name || (a[i].ID != sectionCode && !bytes.Equal(a[i].Payload, b[i].Payload)) {
				t.Fatalf("section %d (id %d) changed", i, a[i].ID)
			}
		}
	})
}
