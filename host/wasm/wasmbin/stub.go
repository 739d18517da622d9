package wasmbin

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

// stubBody is a function body that declares no locals and traps:
// size 3, 0 local declarations, unreachable, end. It is valid for every
// function type, since the stack is polymorphic after unreachable.
var stubBody = []byte{0x03, 0x00, 0x00, 0x0b}

// Stub returns a copy of a module in which every function body is replaced
// by `unreachable`: every other section (types, imports, functions, tables,
// memory, globals, exports, elements, data, custom sections) is copied byte
// for byte. The stub has the same shape as the module, is cheap to decode
// and validate, and can never compute anything: calling any of its functions
// traps. A host uses it as a stand-in for the module when it runs machine
// code compiled from the real module (see host/wasm's load cache).
func Stub(wasm []byte) ([]byte, error) {
	secs, err := Sections(wasm)
	if err != nil {
		return nil, err
	}
	var code *Section
	for i := range secs {
		if secs[i].ID == sectionCode {
			if code != nil {
				return nil, fmt.Errorf("%w: two code sections (at bytes %d and %d)", ErrMalformed, code.Start, secs[i].Start)
			}
			code = &secs[i]
		}
	}
	if code == nil {
		return append([]byte(nil), wasm...), nil
	}
	r := &reader{b: code.Payload}
	n := r.u32()
	if r.err != nil {
		return nil, fmt.Errorf("code section at byte %d: %w", code.Start, r.wrapped())
	}
	if uint64(n) > uint64(len(code.Payload)) {
		return nil, fmt.Errorf("%w: code section at byte %d claims %d bodies in %d bytes", ErrMalformed, code.Start, n, len(code.Payload))
	}
	payload := wasmenc.AppendULEB128(make([]byte, 0, 5+len(stubBody)*int(n)), uint64(n))
	for i := uint32(0); i < n; i++ {
		payload = append(payload, stubBody...)
	}
	out := make([]byte, 0, len(wasm)-(code.End-code.Start)+len(payload)+6)
	out = append(out, wasm[:code.Start]...)
	out = wasmenc.AppendSection(out, sectionCode, payload)
	return append(out, wasm[code.End:]...), nil
}
