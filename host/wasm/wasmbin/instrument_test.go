package wasmbin

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

// sec encodes one section.
func sec(id byte, payload ...byte) []byte {
	return wasmenc.AppendSection(nil, id, payload)
}

// custom encodes a custom section.
func custom(name string, payload ...byte) []byte {
	p := wasmenc.AppendULEB128(nil, uint64(len(name)))
	p = append(p, name...)
	return sec(0, append(p, payload...)...)
}

// mod assembles a module from sections.
func mod(sections ...[]byte) []byte {
	b := append([]byte{}, Magic...)
	for _, s := range sections {
		b = append(b, s...)
	}
	return b
}

// code encodes a code section from function bodies (locals + instructions, no size).
func code(bodies ...[]byte) []byte {
	p := wasmenc.AppendULEB128(nil, uint64(len(bodies)))
	for _, b := range bodies {
		p = wasmenc.AppendULEB128(p, uint64(len(b)))
		p = append(p, b...)
	}
	return sec(10, p...)
}

var (
	typeSec = sec(1, 1, 0x60, 0, 0)                // type 0: () -> ()
	funcSec = sec(3, 1, 0)                         // one function of type 0
	expSec  = sec(7, 1, 1, 'f', 0, 0)              // export "f" func 0
	memSec  = sec(5, 1, 0, 1)                      // memory min 1
	globSec = sec(6, 1, 0x7f, 0x01, 0x41, 0, 0x0b) // one i32 global
	// two imported globals and an imported function
	impSec = sec(2, 3,
		1, 'm', 1, 'a', 3, 0x7f, 0,
		1, 'm', 1, 'b', 3, 0x7e, 1,
		1, 'm', 1, 'c', 0, 0)
)

// chk is the inserted check for flag global g.
func chk(g byte) []byte { return checkCode(uint64(g), uint64(g)+1) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestInstrument(t *testing.T) {
	tests := []struct {
		name     string
		in       []byte
		wantG    byte   // index of the new flag global
		checks   int    // how many checks the first body must have
		body     []byte // the instrumented first function body
		sections []byte // expected ids of the output's sections, in order
	}{
		{
			name:     "loop, no global or export section",
			in:       mod(typeSec, funcSec, memSec, code([]byte{0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b})),
			wantG:    0,
			checks:   2,
			body:     cat([]byte{0}, chk(0), []byte{0x03, 0x40}, chk(0), []byte{0x0c, 0, 0x0b, 0x0b}),
			sections: []byte{1, 3, 5, 6, 7, 10},
		},
		{
			name:     "imported and defined globals",
			in:       mod(typeSec, impSec, funcSec, memSec, globSec, expSec, code([]byte{0, 0x03, 0x7f, 0x41, 1, 0x0b, 0x1a, 0x0b})),
			wantG:    3,
			checks:   2,
			body:     cat([]byte{0}, chk(3), []byte{0x03, 0x7f}, chk(3), []byte{0x41, 1, 0x0b, 0x1a, 0x0b}),
			sections: []byte{1, 2, 3, 5, 6, 7, 10},
		},
		{
			name: "immediates that look like loop are not loops",
			in: mod(typeSec, funcSec, memSec, code(cat(
				[]byte{1, 2, 0x7f},                                               // locals: two i32
				[]byte{0x41, 0x03, 0x1a},                                         // i32.const 3
				[]byte{0x42, 0x83, 0x03, 0x1a},                                   // i64.const (multi-byte)
				[]byte{0x44, 3, 3, 3, 3, 3, 3, 3, 3, 0x1a},                       // f64.const
				[]byte{0x43, 3, 3, 3, 3, 0x1a},                                   // f32.const
				[]byte{0x41, 0, 0x28, 0x03, 0x03, 0x1a},                          // i32.load align=3 offset=3
				[]byte{0x41, 0, 0x28, 0x42, 0x00, 0x03, 0x1a},                    // i32.load multi-memory memidx 0
				[]byte{0x02, 0x40, 0x0e, 2, 3, 3, 0, 0x0b},                       // br_table with 3s
				[]byte{0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 8, 3, 0},                 // memory.init 3
				[]byte{0xfc, 9, 3},                                               // data.drop 3
				[]byte{0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 10, 0, 0},                // memory.copy
				[]byte{0xfd, 12, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, // v128.const
				[]byte{0xfd, 12, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
				[]byte{0xfd, 13, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, // i8x16.shuffle
				[]byte{0xfd, 21, 3, 0x1a},                                        // i8x16.extract_lane_s 3
				[]byte{0xd0, 0x70, 0xd1, 0x1a},                                   // ref.null func; ref.is_null
				[]byte{0x41, 0, 0x41, 0, 0x41, 0, 0x1c, 1, 0x7f, 0x1a},           // select (i32)
				[]byte{0x02, 0x83, 0x00, 0x0b},                                   // block with type index 3 (2-byte s33)
				[]byte{0x03, 0x40, 0x0b},                                         // the only loop
				[]byte{0x0b},
			))),
			wantG:  0,
			checks: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, name, err := Instrument(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if name != InterruptGlobal {
				t.Fatalf("global name %q", name)
			}
			exps, err := Exports(out)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range exps {
				if e.Name == InterruptGlobal && e.Kind == 3 {
					found = true
				}
			}
			if !found {
				t.Fatalf("no global export %q in %v", InterruptGlobal, exps)
			}
			secs, err := Sections(out)
			if err != nil {
				t.Fatal(err)
			}
			var ids []byte
			var codeSec []byte
			for _, s := range secs {
				ids = append(ids, s.ID)
				if s.ID == 10 {
					codeSec = s.Payload
				}
			}
			if tt.sections != nil && !bytes.Equal(ids, tt.sections) {
				t.Fatalf("sections %v, want %v", ids, tt.sections)
			}
			body := firstBody(t, codeSec)
			if tt.body != nil && !bytes.Equal(body, tt.body) {
				t.Fatalf("body\n got % x\nwant % x", body, tt.body)
			}
			if n := bytes.Count(body, chk(tt.wantG)); n != tt.checks {
				t.Fatalf("body has %d checks, want %d: % x", n, tt.checks, body)
			}
			// The export names the new global.
			for _, s := range secs {
				if s.ID == 7 && !bytes.HasSuffix(s.Payload, append([]byte(InterruptGlobal), 3, tt.wantG)) {
					t.Fatalf("export section % x does not end with the global export", s.Payload)
				}
			}
		})
	}
}

func firstBody(t *testing.T, p []byte) []byte {
	t.Helper()
	r := &reader{b: p}
	if n := r.u32(); n < 1 {
		t.Fatalf("code section has %d bodies", n)
	}
	size := r.u32()
	if r.err != nil || r.off+int(size) > len(p) {
		t.Fatalf("bad code section % x", p)
	}
	return p[r.off : r.off+int(size)]
}

func TestInstrumentCustomSections(t *testing.T) {
	in := mod(custom("first", 1), typeSec, custom(".debug_info", 9, 9), funcSec, memSec, custom("name", 2), code([]byte{0, 0x0b}), custom(".debug_line", 7))
	out, _, err := Instrument(in)
	if err != nil {
		t.Fatal(err)
	}
	secs, err := Sections(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range secs {
		if s.ID == 0 {
			got = append(got, s.Name)
		} else {
			got = append(got, string('0'+rune(s.ID/10))+string('0'+rune(s.ID%10)))
		}
	}
	want := []string{"first", "01", "03", "05", "name", "06", "07", "10"}
	if len(got) != len(want) {
		t.Fatalf("sections %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sections %v, want %v", got, want)
		}
	}
}

func TestInstrumentRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"not wasm", []byte("hello"), ErrNotWasm},
		{"unknown opcode", mod(typeSec, funcSec, memSec, code([]byte{0, 0xfb, 0, 0x0b})), ErrUnsupported},
		{"GC block type", mod(typeSec, funcSec, memSec, code([]byte{0, 0x02, 0x63, 0x6e, 0x0b, 0x0b})), ErrUnsupported},
		{"unknown 0xfc", mod(typeSec, funcSec, memSec, code([]byte{0, 0xfc, 18, 0x0b})), ErrUnsupported},
		{"truncated immediate", mod(typeSec, funcSec, memSec, code([]byte{0, 0x44, 1, 2})), ErrMalformed},
		{"truncated LEB", mod(typeSec, funcSec, memSec, code([]byte{0, 0x41, 0x80})), ErrMalformed},
		{"body overruns", mod(typeSec, funcSec, memSec, sec(10, 1, 9, 0, 0x0b)), ErrMalformed},
		{"trailing bytes", mod(typeSec, funcSec, memSec, sec(10, 1, 2, 0, 0x0b, 0)), ErrMalformed},
		{"no end", mod(typeSec, funcSec, memSec, code([]byte{0, 0x01})), ErrMalformed},
		{"unknown section", mod(typeSec, sec(14, 0)), ErrUnsupported},
		{"no memory", mod(typeSec, funcSec, code([]byte{0, 0x0b})), ErrUnsupported},
		{"sections out of order", mod(funcSec, typeSec), ErrMalformed},
		{"already instrumented", mod(sec(6, 1, 0x7f, 1, 0x41, 0, 0x0b), sec(7, 1, 20, '_', '_', 't', 'o', 'l', 'l', 'g', 'a', 't', 'e', '_', 'i', 'n', 't', 'e', 'r', 'r', 'u', 'p', 't', 3, 0)), ErrUnsupported},
		{"GC value type in locals", mod(typeSec, funcSec, memSec, code([]byte{1, 1, 0x6e, 0x0b})), ErrUnsupported},
		{"unknown value type in locals", mod(typeSec, funcSec, memSec, code([]byte{1, 1, 0x55, 0x0b})), ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Instrument(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzInstrument(f *testing.F) {
	f.Add(module())
	f.Add(mod(typeSec, funcSec, memSec, expSec, code([]byte{0, 0x0b})))
	f.Add(mod(typeSec, impSec, funcSec, memSec, globSec, expSec, code([]byte{0, 0x03, 0x7f, 0x41, 1, 0x0b, 0x1a, 0x0b})))
	f.Add(mod(typeSec, funcSec, memSec, code([]byte{0, 0x03, 0x40, 0xfd, 12, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0x1a, 0x0b, 0x0b})))
	// typed function references, tail calls
	f.Add(mod(sec(1, 1, 0x60, 1, 0x63, 0, 0), sec(3, 1, 0), memSec, code([]byte{1, 1, 0x64, 0, 0x02, 0x63, 0, 0x20, 0, 0x0b, 0x1a, 0x20, 0, 0x15, 0, 0x0b})))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, name, err := Instrument(in)
		if err != nil {
			return
		}
		if _, err := Sections(out); err != nil {
			t.Fatalf("output does not parse: %v", err)
		}
		exps, err := Exports(out)
		if err != nil {
			t.Fatalf("output exports do not parse: %v", err)
		}
		found := false
		for _, e := range exps {
			if e.Name == name && e.Kind == 3 {
				found = true
			}
		}
		if !found {
			t.Fatalf("output does not export %q", name)
		}
		// Instrumenting twice is refused (the name is taken), never a panic.
		if _, _, err := Instrument(out); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("second Instrument: %v", err)
		}
	})
}
