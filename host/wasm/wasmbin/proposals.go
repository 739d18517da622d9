package wasmbin

import (
	"bytes"
	"fmt"
	"math/bits"
	"strings"
)

// Proposal is a set of WebAssembly proposals past the 2.0 specification
// (bulk memory, multi-value, reference types, SIMD, ... are 2.0 and have no
// bit here).
type Proposal uint32

// The proposals Proposals recognises, by the name the WebAssembly community
// group gives them.
const (
	ProposalTailCall Proposal = 1 << iota
	ProposalExtendedConst
	ProposalFunctionReferences
	ProposalGC
	ProposalExceptionHandling
	ProposalThreads
	ProposalMemory64
	ProposalMultiMemory
	ProposalRelaxedSIMD
	ProposalWideArithmetic
	ProposalCustomPageSizes
	ProposalComponentModel
)

var proposalNames = [...]string{
	"tail-call", "extended-const", "function-references", "gc", "exception-handling", "threads",
	"memory64", "multi-memory", "relaxed-simd", "wide-arithmetic", "custom-page-sizes", "component-model",
}

// Names lists the proposals of p, in the order of the constants above.
func (p Proposal) Names() []string {
	var out []string
	for p != 0 {
		i := bits.TrailingZeros32(uint32(p))
		if i < len(proposalNames) {
			out = append(out, proposalNames[i])
		}
		p &^= 1 << i
	}
	return out
}

func (p Proposal) String() string { return strings.Join(p.Names(), ", ") }

// componentLayer is the version and layer of a WebAssembly component
// (component-model), where a core module has version 1, layer 0.
var componentLayer = []byte{0x0d, 0x00, 0x01, 0x00}

// Proposals reports which proposals past WebAssembly 2.0 a module uses, as
// far as its types, limits, sections and instructions show. It reads the
// type, import, table, memory, global, tag and code sections; it stops at the
// first thing it cannot decode and returns what it found up to there with the
// error (a GC type, for instance, ends the type section: the gc bit is set and
// the error wraps ErrUnsupported). A WebAssembly component is reported as
// ProposalComponentModel.
func Proposals(wasm []byte) (Proposal, error) {
	if len(wasm) >= 8 && bytes.Equal(wasm[:4], Magic[:4]) && bytes.Equal(wasm[4:8], componentLayer) {
		return ProposalComponentModel, nil
	}
	secs, err := Sections(wasm)
	if err != nil {
		return 0, err
	}
	var used Proposal
	memories := 0
	for _, s := range secs {
		r := &reader{b: s.Payload}
		switch s.ID {
		case sectionType:
			r.types()
		case sectionImport:
			c, _ := r.imports(r.u32(), nil)
			memories += int(c.memories)
		case sectionTable:
			_ = r.tables(r.u32(), nil)
		case sectionMemory:
			n := r.u32()
			for i := uint32(0); i < n && r.err == nil; i++ {
				r.limits()
			}
			memories += int(n)
		case sectionGlobal:
			n := r.u32()
			for i := uint32(0); i < n && r.err == nil; i++ {
				r.valType()
				r.byte()
				r.constExpr()
			}
		case sectionTag:
			r.use(ProposalExceptionHandling)
		case sectionCode:
			r.walkCode()
		}
		used |= r.used
		if r.err != nil {
			if memories > 1 {
				used |= ProposalMultiMemory
			}
			return used, fmt.Errorf("section %d at byte %d: %w", s.ID, s.Start, r.wrapped())
		}
	}
	if memories > 1 {
		used |= ProposalMultiMemory
	}
	return used, nil
}

// walkCode reads the code section's function bodies (locals and every
// instruction); the proposals each body uses are added to r's, and the first
// error ends the walk.
func (r *reader) walkCode() {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		start := r.off
		r.skip(int(size))
		if r.err != nil {
			break
		}
		fr := &reader{b: r.b[start:r.off]}
		groups := fr.u32()
		for j := uint32(0); j < groups && fr.err == nil; j++ {
			fr.u32()
			fr.valType()
		}
		for fr.err == nil && fr.off < len(fr.b) {
			fr.instruction()
		}
		r.used |= fr.used
		if fr.err != nil {
			r.fail(fmt.Errorf("function body %d: %w", i, fr.wrapped()))
			break
		}
	}
}

const (
	sectionType  = 1
	sectionTable = 4
	sectionTag   = 13
)

// types reads the type section. Function types are read in full; the
// composite, recursive and sub types of gc end it.
func (r *reader) types() {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		switch form := r.byte(); form {
		case 0x60:
			for k := 0; k < 2 && r.err == nil; k++ { // params, results
				m := r.u32()
				for j := uint32(0); j < m && r.err == nil; j++ {
					r.valType()
				}
			}
		case 0x4e, 0x50, 0x4f, 0x5e, 0x5f: // rec, sub, sub final, array, struct
			r.use(ProposalGC)
			r.fail(fmt.Errorf("%w: type %d is a gc type (0x%02x)", ErrUnsupported, i, form))
		default:
			if r.err == nil {
				r.fail(fmt.Errorf("%w: type %d has unknown form 0x%02x", ErrUnsupported, i, form))
			}
		}
	}
}

// imported counts the entries of an import section by kind; memoryMin is
// the initial size, in pages, of the first memory imported.
type imported struct {
	funcs, tables, memories, globals, tags uint32
	memoryMin                              uint64
}

// imports reads the n entries of an import section (after its count) and
// counts them by kind. table, when not nil, is given each imported table's
// import index and initial size; an error it returns ends the read.
func (r *reader) imports(n uint32, table func(i uint32, min uint64) error) (imported, error) {
	var c imported
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0: // func: type index
			r.u32()
			c.funcs++
		case 1: // table: reftype, limits
			r.refType()
			_, min := r.limits()
			c.tables++
			if table != nil {
				if err := table(i, min); err != nil {
					return c, err
				}
			}
		case 2: // memory: limits
			_, min := r.limits()
			if c.memories == 0 {
				c.memoryMin = min
			}
			c.memories++
		case 3: // global: valtype, mutability
			r.valType()
			r.byte()
			c.globals++
		case 4: // tag: attribute, type index
			r.use(ProposalExceptionHandling)
			r.byte()
			r.u32()
			c.tags++
		default:
			r.fail(fmt.Errorf("%w: import %d has unknown kind %d", ErrUnsupported, i, kind))
		}
	}
	return c, nil
}

// tables reads the n entries of a table section (after its count), whose
// entries may carry an initializer (function-references: 0x40 0x00
// tabletype expr). table, when not nil, is given each table's index in the
// section and initial size; an error it returns ends the read.
func (r *reader) tables(n uint32, table func(i uint32, min uint64) error) error {
	for i := uint32(0); i < n && r.err == nil; i++ {
		init := false
		if r.off+1 < len(r.b) && r.b[r.off] == 0x40 && r.b[r.off+1] == 0x00 {
			r.off += 2
			init = true
			r.use(ProposalFunctionReferences)
		}
		r.refType()
		_, min := r.limits()
		if init {
			r.constExpr()
		}
		if table != nil {
			if err := table(i, min); err != nil {
				return err
			}
		}
	}
	return nil
}

// constExpr reads a constant expression up to its `end` and records
// extended-const when it computes (i32/i64 add, sub, mul).
func (r *reader) constExpr() {
	for r.err == nil {
		switch r.instruction() {
		case 0x0b:
			return
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e:
			r.use(ProposalExtendedConst)
		}
	}
}
