// Package hostile builds small, valid WebAssembly modules of the kind a hostile
// policy author uploads to hurt the server that loads them (not the request
// that evaluates them): functions declaring billions of locals, a `start`
// function that never returns, deeply nested blocks, and so on
// (../shared/HOSTILE-MODULES.md, issue 30). Each is a waPC module as far as the
// host can tell at a glance: it exports memory and `__guest_call`.
//
// Tests generate the modules they need with it; nothing is downloaded or
// committed. It must not import anything of the host: it writes bytes, with
// the binary format's encoder internal/wasmenc (the one host/wasm/wasmbin uses).
package hostile

import "github.com/tollgate-dev/tollgate/internal/wasmenc"

// Module describes a module to build. The zero value is a minimal waPC module
// whose `__guest_call` returns 0.
type Module struct {
	// Body is the hostile function's code (instructions and its final
	// `end`), without the locals declaration; nil means a function of one
	// `end`. The function has type () -> ().
	Body []byte
	// Locals are the hostile function's local declarations: each entry
	// declares Count locals of Type (ValI32, ValI64, ...).
	Locals []LocalDecl
	// Start makes the hostile function the module's `start` function.
	Start bool
	// ExportAs also exports the hostile function under this name
	// (e.g. "_initialize" or "_start").
	ExportAs string
	// ExtraFuncs adds this many more functions of type () -> () with an
	// empty body.
	ExtraFuncs int
	// MemoryPages is the minimum size of the exported memory (default 1).
	MemoryPages uint32
	// GuestCall is the code of `__guest_call` (type (i32, i32) -> i32,
	// instructions and final `end`); nil returns 0.
	GuestCall []byte
	// OPA shapes the module as an OPA Wasm module (what host/opa checks
	// before compiling): it imports `env`.`memory` instead of defining one,
	// and exports the OPA ABI's functions, each the hostile function.
	OPA bool
}

// OPAExports are the exports host/opa requires of an OPA Wasm module.
var OPAExports = []string{"eval", "builtins", "entrypoints", "opa_malloc", "opa_json_parse", "opa_json_dump",
	"opa_heap_ptr_get", "opa_heap_ptr_set", "opa_eval_ctx_new", "opa_eval_ctx_set_input", "opa_eval_ctx_set_data",
	"opa_eval_ctx_set_entrypoint", "opa_eval_ctx_get_result"}

// LocalDecl is one entry of a function's local declarations.
type LocalDecl struct {
	Count uint32
	Type  byte
}

// Value types.
const (
	ValI32 byte = 0x7f
	ValI64 byte = 0x7e
)

// Instructions used by the generators.
const (
	opBlock   = 0x02
	opLoop    = 0x03
	opIf      = 0x04
	opBr      = 0x0c
	opEnd     = 0x0b
	opI32     = 0x41
	blockVoid = 0x40
)

// Bytes encodes m.
func (m Module) Bytes() []byte {
	out := append([]byte(nil), wasmenc.Magic...)
	// Types: 0 = (i32, i32) -> i32 (__guest_call), 1 = () -> ().
	out = section(out, 1, vec(
		[]byte{0x60, 0x02, ValI32, ValI32, 0x01, ValI32},
		[]byte{0x60, 0x00, 0x00},
	))
	if m.OPA { // env.memory, at least 2 pages
		imp := append(wasmenc.AppendName(wasmenc.AppendName(nil, "env"), "memory"), 0x02, 0x00, 0x02)
		out = section(out, 2, vec(imp))
	}
	nfuncs := 2 + m.ExtraFuncs
	funcs := []byte{}
	funcs = wasmenc.AppendULEB128(funcs, uint64(nfuncs))
	funcs = append(funcs, 0x00, 0x01)
	for i := 0; i < m.ExtraFuncs; i++ {
		funcs = append(funcs, 0x01)
	}
	out = section(out, 3, funcs)
	pages := m.MemoryPages
	if pages == 0 {
		pages = 1
	}
	exports := [][]byte{export("__guest_call", 0x00, 0)}
	if m.OPA {
		for _, name := range OPAExports {
			exports = append(exports, export(name, 0x00, 1))
		}
	} else {
		out = section(out, 5, wasmenc.AppendULEB128([]byte{0x01, 0x00}, uint64(pages)))
		exports = append(exports, export("memory", 0x02, 0))
	}
	if m.ExportAs != "" {
		exports = append(exports, export(m.ExportAs, 0x00, 1))
	}
	out = section(out, 7, vec(exports...))
	if m.Start {
		out = section(out, 8, wasmenc.AppendULEB128(nil, 1))
	}
	// Code.
	gc := m.GuestCall
	if gc == nil {
		gc = []byte{opI32, 0x00, opEnd}
	}
	bodies := [][]byte{body(nil, gc)}
	hb := m.Body
	if hb == nil {
		hb = []byte{opEnd}
	}
	bodies = append(bodies, body(m.Locals, hb))
	for i := 0; i < m.ExtraFuncs; i++ {
		bodies = append(bodies, body(nil, []byte{opEnd}))
	}
	out = section(out, 10, vec(bodies...))
	return out
}

// Minimal is a module that does nothing: a valid waPC-shaped module whose
// `__guest_call` returns 0 (a failed call).
func Minimal() []byte { return Module{}.Bytes() }

// Locals is a module whose one function declares n locals of type i64 in a
// single declaration (n = 4e9 is 220 bytes).
func Locals(n uint32) []byte {
	return Module{Locals: []LocalDecl{{Count: n, Type: ValI64}}}.Bytes()
}

// LocalsSpread is a module whose one function declares perEntry i64 locals in
// each of entries declarations (1,000 x 1,000,000 is about 4 KB).
func LocalsSpread(entries int, perEntry uint32) []byte {
	decls := make([]LocalDecl, entries)
	for i := range decls {
		decls[i] = LocalDecl{Count: perEntry, Type: ValI64}
	}
	return Module{Locals: decls}.Bytes()
}

// StartLoop is a module whose `start` function loops forever:
// (func $s (loop $l (br $l))) (start $s).
func StartLoop() []byte {
	return Module{Body: loopForever(), Start: true}.Bytes()
}

// InitializeLoop is a reactor whose exported `_initialize` loops forever.
func InitializeLoop() []byte {
	return Module{Body: loopForever(), ExportAs: "_initialize"}.Bytes()
}

// NestedBlocks is a module with one function of depth nested empty blocks:
// `block` x depth, then `end` x depth.
func NestedBlocks(depth int) []byte {
	return Module{Body: nested(depth, []byte{opBlock, blockVoid})}.Bytes()
}

// NestedIfs is like NestedBlocks with `i32.const 0; if` at each level.
func NestedIfs(depth int) []byte { return Module{Body: NestedIfsBody(depth)}.Bytes() }

// NestedIfsBody is the body of NestedIfs's function, for a Module of
// another shape.
func NestedIfsBody(depth int) []byte { return nested(depth, []byte{opI32, 0x00, opIf, blockVoid}) }

// Functions is a module with n trivial functions besides `__guest_call`.
func Functions(n int) []byte {
	return Module{ExtraFuncs: n}.Bytes()
}

func loopForever() []byte { return []byte{opLoop, blockVoid, opBr, 0x00, opEnd, opEnd} }

func nested(depth int, open []byte) []byte {
	b := make([]byte, 0, depth*(len(open)+1)+1)
	for i := 0; i < depth; i++ {
		b = append(b, open...)
	}
	for i := 0; i < depth; i++ {
		b = append(b, opEnd)
	}
	return append(b, opEnd)
}

func body(locals []LocalDecl, code []byte) []byte {
	b := wasmenc.AppendULEB128(nil, uint64(len(locals)))
	for _, l := range locals {
		b = wasmenc.AppendULEB128(b, uint64(l.Count))
		b = append(b, l.Type)
	}
	b = append(b, code...)
	return append(wasmenc.AppendULEB128(nil, uint64(len(b))), b...)
}

func export(name string, kind byte, index uint64) []byte {
	return wasmenc.AppendULEB128(append(wasmenc.AppendName(nil, name), kind), index)
}

func vec(items ...[]byte) []byte { return wasmenc.AppendVector(nil, items...) }

func section(out []byte, id byte, payload []byte) []byte {
	return wasmenc.AppendSection(out, id, payload)
}
