package wasmbin

import (
	"errors"
	"fmt"
)

// ErrLimit is wrapped by every LimitError: the module is well formed but
// exceeds a structural limit (Limits).
var ErrLimit = errors.New("module exceeds a structural limit")

// Limits bounds the structure of a module, checked by CheckLimits while it
// is read, before a compiler sees it: a compiler's time and memory grow with
// these numbers (wazero's with the locals of a function and, faster than
// linearly, with the nesting of its blocks), and a module of a few hundred
// bytes can claim billions of locals. A zero field means its default
// (DefaultLimits).
type Limits struct {
	// ModuleBytes is the largest module, in bytes.
	ModuleBytes uint64
	// Types, Functions, Imports, Exports, Globals and DataSegments bound the
	// entries of those sections (Functions: the module's own functions;
	// Globals: imported and defined).
	Types, Functions, Imports, Exports, Globals, DataSegments uint32
	// Params and Results bound each function type.
	Params, Results uint32
	// TableEntries bounds the initial size of each table.
	TableEntries uint64
	// Locals bounds the locals one function declares (its parameters aside).
	Locals uint32
	// BodyBytes bounds the size of one function body.
	BodyBytes uint32
	// Nesting bounds how deep one function nests blocks, loops, ifs and
	// try blocks (its body itself not counted).
	Nesting uint32
}

// DefaultLimits are the limits used for a zero field of Limits: those V8
// and wasmparser (wasmtime) agree on, except Nesting, which neither
// bounds (their compilers' work does not grow faster than the code does;
// wazero's does), and ModuleBytes, lower than their 1 GiB. See
// RATIONALE.md ("Why these structural limits, checked before compiling?") for the modules they were
// measured against.
func DefaultLimits() Limits {
	return Limits{
		ModuleBytes:  DefaultModuleBytes,
		Types:        1_000_000,
		Functions:    1_000_000,
		Imports:      100_000,
		Exports:      100_000,
		Globals:      1_000_000,
		DataSegments: 100_000,
		Params:       1_000,
		Results:      1_000,
		TableEntries: 10_000_000,
		Locals:       50_000,
		BodyBytes:    7_654_321,
		Nesting:      DefaultNesting,
	}
}

// DefaultModuleBytes is the default Limits.ModuleBytes: 256 MiB, four
// times the largest policy module known (Kubewarden's kyverno-dsl, 64 MB).
const DefaultModuleBytes = 256 << 20

// DefaultNesting is the default Limits.Nesting.
const DefaultNesting = 10_000

// WithDefaults is l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	set := func(v *uint32, def uint32) {
		if *v == 0 {
			*v = def
		}
	}
	if l.ModuleBytes == 0 {
		l.ModuleBytes = d.ModuleBytes
	}
	if l.TableEntries == 0 {
		l.TableEntries = d.TableEntries
	}
	set(&l.Types, d.Types)
	set(&l.Functions, d.Functions)
	set(&l.Imports, d.Imports)
	set(&l.Exports, d.Exports)
	set(&l.Globals, d.Globals)
	set(&l.DataSegments, d.DataSegments)
	set(&l.Params, d.Params)
	set(&l.Results, d.Results)
	set(&l.Locals, d.Locals)
	set(&l.BodyBytes, d.BodyBytes)
	set(&l.Nesting, d.Nesting)
	return l
}

// LimitError is the error for a module over one of its Limits.
type LimitError struct {
	// Limit names the limit: "module size", "types", "functions",
	// "imports", "exports", "globals", "data segments", "parameters",
	// "results", "table entries", "locals", "function body size",
	// "nesting depth".
	Limit string
	// Index is the function (in the function index space, imports
	// first), type or table at fault, or -1 for a limit on the whole module.
	Index int64
	// Value is what the module has; Max is the limit.
	Value, Max uint64
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "module size":
		return fmt.Sprintf("the module is %d bytes; the limit is %d", e.Value, e.Max)
	case "locals":
		return fmt.Sprintf("function %d declares %d locals; the limit is %d", e.Index, e.Value, e.Max)
	case "function body size":
		return fmt.Sprintf("function %d has a body of %d bytes; the limit is %d", e.Index, e.Value, e.Max)
	case "nesting depth":
		return fmt.Sprintf("function %d nests blocks %d deep; the limit is %d", e.Index, e.Value, e.Max)
	case "parameters", "results":
		return fmt.Sprintf("type %d has %d %s; the limit is %d", e.Index, e.Value, e.Limit, e.Max)
	case "table entries":
		return fmt.Sprintf("table %d starts with %d entries; the limit is %d", e.Index, e.Value, e.Max)
	}
	return fmt.Sprintf("the module declares %d %s; the limit is %d", e.Value, e.Limit, e.Max)
}

// Is makes errors.Is(err, ErrLimit) hold.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Stats are the structural sizes of a module that Limits bounds: the
// largest of each (MeasureLimits).
type Stats struct {
	ModuleBytes                                               uint64
	Types, Functions, Imports, Exports, Globals, DataSegments uint32
	Params, Results                                           uint32
	TableEntries                                              uint64
	Locals, BodyBytes, Nesting                                uint32
	LocalsFunc, BodyBytesFunc, NestingFunc                    int64
}

// CheckLimits reads a module's sections and function bodies and returns a
// *LimitError for the first limit it exceeds (zero fields of l are
// defaults), or an error wrapping ErrMalformed or ErrUnsupported for a
// module it cannot read. It allocates nothing in proportion to what the
// module claims.
func CheckLimits(wasm []byte, l Limits) error {
	_, _, err := measure(wasm, l.WithDefaults(), true)
	return err
}

// CheckLimitsAndSelect is CheckLimits that also reports, from the same read
// of every function body, the index in the code section of the first body
// with a `select` typed with a typed reference ((ref null? ht), from
// function-references), or -1 when there is none (or an error). wazero
// v1.12's compiler skips a fixed two bytes after such a select (its
// validator reads it right), so it would run the heap type's bytes as
// instructions: a module that has one must not be compiled by it.
func CheckLimitsAndSelect(wasm []byte, l Limits) (typedRefSelect int, err error) {
	_, typedRefSelect, err = measure(wasm, l.WithDefaults(), true)
	if err != nil {
		return -1, err
	}
	return typedRefSelect, nil
}

// MeasureLimits returns the largest of each structural size of a module
// (to choose limits from the modules one has).
func MeasureLimits(wasm []byte) (Stats, error) {
	st, _, err := measure(wasm, Limits{}, false)
	return st, err
}

// measure reads a module once: its structural sizes, checked against l when
// check is set, and the code-section index of the first function body with
// a typed-reference select (-1 when none).
func measure(wasm []byte, l Limits, check bool) (Stats, int, error) {
	var st Stats
	refSelect := -1
	st.ModuleBytes = uint64(len(wasm))
	over := func(name string, index int64, v, max uint64) error {
		if check && v > max {
			return &LimitError{Limit: name, Index: index, Value: v, Max: max}
		}
		return nil
	}
	if err := over("module size", -1, st.ModuleBytes, l.ModuleBytes); err != nil {
		return st, refSelect, err
	}
	secs, err := Sections(wasm)
	if err != nil {
		return st, refSelect, err
	}
	tableEntries := func(i uint32, min uint64) error {
		st.TableEntries = max(st.TableEntries, min)
		return over("table entries", int64(i), min, l.TableEntries)
	}
	var importedFuncs uint64
	for _, s := range secs {
		r := &reader{b: s.Payload}
		var err error
		switch s.ID {
		case sectionType:
			err = measureTypes(r, &st, l, over)
		case sectionImport:
			n := r.u32()
			st.Imports = n
			if err = over("imports", -1, uint64(n), uint64(l.Imports)); err != nil {
				break
			}
			var c imported
			c, err = r.imports(n, tableEntries)
			importedFuncs = uint64(c.funcs)
			st.Globals += c.globals
		case sectionFunction:
			n := r.u32()
			st.Functions = n
			err = over("functions", -1, uint64(n), uint64(l.Functions))
		case sectionTable:
			err = r.tables(r.u32(), tableEntries)
		case sectionGlobal:
			n := r.u32()
			st.Globals += n
			err = over("globals", -1, uint64(st.Globals), uint64(l.Globals))
		case sectionExport:
			n := r.u32()
			st.Exports = n
			err = over("exports", -1, uint64(n), uint64(l.Exports))
		case sectionData, sectionDataCount:
			n := r.u32()
			st.DataSegments = max(st.DataSegments, n)
			err = over("data segments", -1, uint64(n), uint64(l.DataSegments))
		case sectionCode:
			refSelect, err = measureCode(r, importedFuncs, &st, l, over)
		}
		if err != nil {
			return st, refSelect, err
		}
		if r.err != nil {
			return st, refSelect, fmt.Errorf("section %d at byte %d: %w", s.ID, s.Start, r.wrapped())
		}
	}
	return st, refSelect, nil
}

const (
	sectionFunction = 3
)

func measureTypes(r *reader, st *Stats, l Limits, over func(string, int64, uint64, uint64) error) error {
	n := r.u32()
	st.Types = n
	if err := over("types", -1, uint64(n), uint64(l.Types)); err != nil {
		return err
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		switch form := r.byte(); form {
		case 0x60:
			for k, name := range []string{"parameters", "results"} {
				m := r.u32()
				if k == 0 {
					st.Params = max(st.Params, m)
					if err := over(name, int64(i), uint64(m), uint64(l.Params)); err != nil {
						return err
					}
				} else {
					st.Results = max(st.Results, m)
					if err := over(name, int64(i), uint64(m), uint64(l.Results)); err != nil {
						return err
					}
				}
				for j := uint32(0); j < m && r.err == nil; j++ {
					r.valType()
				}
			}
		default:
			if r.err == nil {
				r.fail(fmt.Errorf("%w: type %d has form 0x%02x (not a function type)", ErrUnsupported, i, form))
			}
		}
	}
	return nil
}

// measureCode reads every function body: the locals it declares, its size
// and how deep it nests blocks; it returns the index in the code section of
// the first body with a typed-reference select, or -1.
func measureCode(r *reader, importedFuncs uint64, st *Stats, l Limits, over func(string, int64, uint64, uint64) error) (int, error) {
	refSelect := -1
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		index := int64(importedFuncs) + int64(i)
		size := r.u32()
		if size > st.BodyBytes {
			st.BodyBytes, st.BodyBytesFunc = size, index
		}
		if err := over("function body size", index, uint64(size), uint64(l.BodyBytes)); err != nil {
			return refSelect, err
		}
		start := r.off
		r.skip(int(size))
		if r.err != nil {
			return refSelect, fmt.Errorf("function %d: %w", index, r.wrapped())
		}
		fr := &reader{b: r.b[start:r.off]}
		groups := fr.u32()
		var locals uint64
		for j := uint32(0); j < groups && fr.err == nil; j++ {
			locals += uint64(fr.u32())
			fr.valType()
			if err := over("locals", index, locals, uint64(l.Locals)); err != nil {
				// The sum so far is over: report the whole declaration.
				for j++; j < groups && fr.err == nil; j++ {
					locals += uint64(fr.u32())
					fr.valType()
				}
				return refSelect, &LimitError{Limit: "locals", Index: index, Value: locals, Max: uint64(l.Locals)}
			}
		}
		if locals > uint64(st.Locals) {
			st.Locals, st.LocalsFunc = uint32(min(locals, 1<<32-1)), index
		}
		var depth, deepest uint32
		for fr.err == nil && fr.off < len(fr.b) {
			switch fr.instruction() {
			case 0x02, 0x03, 0x04, 0x06, 0x1f: // block, loop, if, try, try_table
				depth++
				deepest = max(deepest, depth)
			case 0x0b: // end (of a block or of the body)
				if depth > 0 {
					depth--
				}
			}
		}
		if fr.err != nil {
			return refSelect, fmt.Errorf("function %d: %w", index, fr.wrapped())
		}
		if fr.refSelect && refSelect < 0 {
			refSelect = int(i)
		}
		if deepest > st.Nesting {
			st.Nesting, st.NestingFunc = deepest, index
		}
		if err := over("nesting depth", index, uint64(deepest), uint64(l.Nesting)); err != nil {
			return refSelect, err
		}
	}
	return refSelect, nil
}

// PageSize is the size of a page of linear memory.
const PageSize = 64 << 10

// InitialMemory is the initial size, in bytes, of a module's first memory
// (imported or defined), what each of its instances starts with; ok is false
// for a module without memory.
func InitialMemory(wasm []byte) (bytes uint64, ok bool, err error) {
	secs, err := Sections(wasm)
	if err != nil {
		return 0, false, err
	}
	for _, s := range secs {
		r := &reader{b: s.Payload}
		switch s.ID {
		case sectionImport:
			c, _ := r.imports(r.u32(), nil)
			if r.err == nil && c.memories > 0 {
				return min(c.memoryMin, 1<<32) * PageSize, true, nil
			}
		case sectionMemory:
			if r.u32() > 0 {
				_, pages := r.limits()
				if r.err == nil {
					return min(pages, 1<<32) * PageSize, true, nil
				}
			}
		}
		if r.err != nil {
			return 0, false, fmt.Errorf("section %d at byte %d: %w", s.ID, s.Start, r.wrapped())
		}
	}
	return 0, false, nil
}
