package wasmbin

import (
	"bytes"
	"errors"
	"testing"
)

// module builds a tiny module with one exported function "f" (type section,
// function section, export section, code section).
func module() []byte {
	b := append([]byte{}, Magic...)
	b = append(b, 1, 4, 1, 0x60, 0, 0)      // type: func () -> ()
	b = append(b, 3, 2, 1, 0)               // function: one of type 0
	b = append(b, 7, 5, 1, 1, 'f', 0x00, 0) // export "f" func 0
	b = append(b, 10, 4, 1, 2, 0, 0x0b)     // code: empty body
	return b
}

func TestCustomSectionRoundTrip(t *testing.T) {
	m := module()
	if _, ok, err := CustomSection(m, "x"); err != nil || ok {
		t.Fatalf("fresh module: ok=%v err=%v", ok, err)
	}
	m2, err := SetCustomSection(m, "x", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	m3, err := SetCustomSection(m2, "x", []byte(`{"a":2}`))
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := CustomSection(m3, "x")
	if err != nil || !ok || string(got) != `{"a":2}` {
		t.Fatalf("got %q ok=%v err=%v", got, ok, err)
	}
	secs, _ := Sections(m3)
	n := 0
	for _, s := range secs {
		if s.ID == 0 {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("want exactly one custom section after replacing, got %d", n)
	}
	ex, err := Exports(m3)
	if err != nil || !HasFuncExport(ex, "f") || HasFuncExport(ex, "g") {
		t.Fatalf("exports %v err %v", ex, err)
	}
}

func TestBadInput(t *testing.T) {
	for name, in := range map[string][]byte{
		"empty":   nil,
		"text":    []byte("hello world, not wasm"),
		"version": {0, 'a', 's', 'm', 2, 0, 0, 0},
	} {
		if err := Check(in); !errors.Is(err, ErrNotWasm) {
			t.Errorf("%s: want ErrNotWasm, got %v", name, err)
		}
	}
	trunc := append(append([]byte{}, Magic...), 1, 100, 1)
	if _, err := Sections(trunc); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated: want ErrMalformed, got %v", err)
	}
}

func FuzzSections(f *testing.F) {
	f.Add(module())
	f.Add(append(append([]byte{}, Magic...), 0, 3, 1, 'x', 9))
	f.Fuzz(func(t *testing.T, b []byte) {
		secs, err := Sections(b)
		if err != nil {
			return
		}
		_, _ = Exports(b)
		out, err := SetCustomSection(b, "k", []byte("v"))
		if err != nil {
			t.Fatalf("SetCustomSection failed on a module Sections accepted: %v", err)
		}
		if p, ok, err := CustomSection(out, "k"); err != nil || !ok || !bytes.Equal(p, []byte("v")) {
			t.Fatalf("round trip: %q %v %v", p, ok, err)
		}
		_ = secs
	})
}
