package wasmbin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

// InterruptGlobal is the export name of the global that Instrument adds.
const InterruptGlobal = "__tollgate_interrupt"

// StartExport is the name under which Instrument exports the function of a
// module's start section, which it removes: the host must call it, with the
// interrupt global armed, right after instantiation (before anything else).
// A start function runs inside instantiation, before the host can reach
// the interrupt global: one that loops would hold the load for ever.
const StartExport = "__tollgate_start"

// ErrUnsupported is returned by Instrument for a module it cannot rewrite
// safely (an instruction or section it does not know). The caller must then run
// the module unmodified and bound it another way.
var ErrUnsupported = errors.New("module cannot be instrumented")

const (
	sectionImport = 2
	sectionMemory = 5
	sectionGlobal = 6
	sectionStart  = 8
	sectionCode   = 10

	opLoop = 0x03
)

// sectionRank orders the non-custom sections as the binary format requires.
var sectionRank = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// CheckInterval is how many function entries and loop iterations an
// instrumented module runs between two visits to the host (see Instrument).
const CheckInterval = 10000

// InstrumentVersion identifies what Instrument produces. Hosts cache its
// output on disk under this version: change it whenever the output for a
// given input changes (the check, CheckInterval, InterruptGlobal, which
// sections are kept).
const InstrumentVersion = 2

// Instrument rewrites a module so that a host can interrupt it. It adds two
// mutable i32 globals: the interrupt flag (initially 0), exported as
// InterruptGlobal, and a countdown (initially CheckInterval). At the start of
// every function body and of every loop it inserts
//
//	countdown -= 1
//	if countdown == 0 {
//	  if interrupt { unreachable }
//	  countdown = CheckInterval
//	  drop(memory.grow 0)
//	}
//
// so that the guest traps within CheckInterval function calls or loop
// iterations after the host sets the flag. The `memory.grow 0` is there for
// the Go scheduler, not for the guest: it is the cheapest instruction that
// makes wazero's compiled code return to Go, where the goroutine can be
// preempted. Without it a spinning guest holds its OS thread and P, the Go
// garbage collector's stop-the-world waits for it forever, and so does the
// timer that would set the flag. The module must therefore have a memory.
//
// A start section is removed and its function exported as StartExport
// instead (see there).
//
// Every other section is copied byte for byte, except `.debug_*` custom
// sections, whose code offsets would be wrong, which are dropped. Instrument
// returns an error wrapping ErrUnsupported or ErrMalformed, and never panics,
// for input it does not fully understand.
func Instrument(wasm []byte) (out []byte, globalName string, err error) {
	secs, err := Sections(wasm)
	if err != nil {
		return nil, "", err
	}
	exports, err := Exports(wasm)
	if err != nil {
		return nil, "", err
	}
	for _, e := range exports {
		if e.Name == InterruptGlobal || e.Name == StartExport {
			return nil, "", fmt.Errorf("%w: it already exports %q", ErrUnsupported, e.Name)
		}
	}
	lastRank := 0
	seen := map[byte]bool{}
	var importedGlobals, definedGlobals, memories uint64
	var startFunc uint64
	hasStart := false
	for _, s := range secs {
		if s.ID == sectionCustom {
			continue
		}
		r, ok := sectionRank[s.ID]
		if !ok {
			return nil, "", fmt.Errorf("%w: unknown section id %d at byte %d", ErrUnsupported, s.ID, s.Start)
		}
		if r <= lastRank || seen[s.ID] {
			return nil, "", fmt.Errorf("%w: section id %d at byte %d is out of order or repeated", ErrMalformed, s.ID, s.Start)
		}
		lastRank = r
		seen[s.ID] = true
		switch s.ID {
		case sectionImport:
			importedGlobals, memories, err = countImports(s.Payload)
			if err != nil {
				return nil, "", fmt.Errorf("import section at byte %d: %w", s.Start, err)
			}
		case sectionGlobal:
			definedGlobals, err = checkGlobals(s.Payload)
			if err != nil {
				return nil, "", fmt.Errorf("global section at byte %d: %w", s.Start, err)
			}
		case sectionMemory:
			r := &reader{b: s.Payload}
			memories += uint64(r.u32())
			if r.err != nil {
				return nil, "", fmt.Errorf("memory section at byte %d: %w", s.Start, r.wrapped())
			}
		case sectionExport:
			if err := checkExports(s.Payload); err != nil {
				return nil, "", fmt.Errorf("export section at byte %d: %w", s.Start, err)
			}
		case sectionStart:
			r := &reader{b: s.Payload}
			startFunc = uint64(r.u32())
			if r.err == nil && r.off != len(s.Payload) {
				r.fail(fmt.Errorf("%w: %d bytes after the start function", ErrMalformed, len(s.Payload)-r.off))
			}
			if r.err != nil {
				return nil, "", fmt.Errorf("start section at byte %d: %w", s.Start, r.wrapped())
			}
			hasStart = true
		}
	}
	if memories == 0 {
		return nil, "", fmt.Errorf("%w: it has no memory (the check needs memory.grow)", ErrUnsupported)
	}
	g := importedGlobals + definedGlobals // the flag; g+1 is the countdown
	if g >= 1<<32-2 {
		return nil, "", fmt.Errorf("%w: too many globals", ErrUnsupported)
	}
	check := checkCode(g, g+1)

	// The new globals: the flag (i32, mutable, 0), the countdown (i32, mutable, CheckInterval).
	newGlobals := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41}
	newGlobals = appendSleb(newGlobals, CheckInterval)
	newGlobals = append(newGlobals, 0x0b)
	newExport := wasmenc.AppendULEB128(nil, uint64(len(InterruptGlobal)))
	newExport = append(newExport, InterruptGlobal...)
	newExport = append(newExport, 3)
	newExport = wasmenc.AppendULEB128(newExport, g)
	newExports := uint64(1)
	if hasStart {
		newExport = wasmenc.AppendULEB128(newExport, uint64(len(StartExport)))
		newExport = append(newExport, StartExport...)
		newExport = append(newExport, 0)
		newExport = wasmenc.AppendULEB128(newExport, startFunc)
		newExports++
	}

	out = make([]byte, 0, len(wasm)+len(wasm)/16+64)
	out = append(out, wasm[:len(Magic)]...)
	globalDone, exportDone := false, false
	emitMissing := func(rank int) {
		if !globalDone && rank > sectionRank[sectionGlobal] {
			out = wasmenc.AppendSection(out, sectionGlobal, append([]byte{2}, newGlobals...))
			globalDone = true
		}
		if !exportDone && rank > sectionRank[sectionExport] {
			out = wasmenc.AppendSection(out, sectionExport, append(wasmenc.AppendULEB128(nil, newExports), newExport...))
			exportDone = true
		}
	}
	for _, s := range secs {
		if s.ID == sectionCustom {
			if strings.HasPrefix(s.Name, ".debug_") {
				continue
			}
			out = append(out, wasm[s.Start:s.End]...)
			continue
		}
		emitMissing(sectionRank[s.ID])
		switch s.ID {
		case sectionGlobal:
			out = wasmenc.AppendSection(out, sectionGlobal, appendVecEntries(s.Payload, 2, newGlobals))
			globalDone = true
		case sectionExport:
			out = wasmenc.AppendSection(out, sectionExport, appendVecEntries(s.Payload, newExports, newExport))
			exportDone = true
		case sectionStart:
			// Exported as StartExport instead.
		case sectionCode:
			code, err := instrumentCode(s.Payload, check)
			if err != nil {
				return nil, "", fmt.Errorf("code section at byte %d: %w", s.Start, err)
			}
			out = wasmenc.AppendSection(out, sectionCode, code)
		default:
			out = append(out, wasm[s.Start:s.End]...)
		}
	}
	emitMissing(1 << 30)
	return out, InterruptGlobal, nil
}

// checkCode is the check Instrument inserts, for the flag and countdown globals.
func checkCode(flag, countdown uint64) []byte {
	get := wasmenc.AppendULEB128([]byte{0x23}, countdown)
	set := wasmenc.AppendULEB128([]byte{0x24}, countdown)
	var b []byte
	b = append(b, get...)
	b = append(b, 0x41, 0x01, 0x6b) // i32.const 1; i32.sub
	b = append(b, set...)
	b = append(b, get...)
	b = append(b, 0x45, 0x04, 0x40) // i32.eqz; if
	b = wasmenc.AppendULEB128(append(b, 0x23), flag)
	b = append(b, 0x04, 0x40, 0x00, 0x0b) // if; unreachable; end
	b = appendSleb(append(b, 0x41), CheckInterval)
	b = append(b, set...)
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0; memory.grow 0; drop
	return append(b, 0x0b)                      // end
}

func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// appendVecEntries returns a vector (count + entries) with more entries.
// The payload's count has been validated by the caller.
func appendVecEntries(payload []byte, count uint64, entries []byte) []byte {
	r := &reader{b: payload}
	n := r.u32()
	p := wasmenc.AppendULEB128(make([]byte, 0, len(payload)+len(entries)+5), uint64(n)+count)
	p = append(p, payload[r.off:]...)
	return append(p, entries...)
}

// checkGlobals validates the global section (so that an entry can be
// appended to it) and returns how many globals it defines.
func checkGlobals(p []byte) (uint64, error) {
	r := &reader{b: p}
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.valType()
		r.byte()
		r.constExpr()
	}
	if r.err == nil && r.off != len(p) {
		r.fail(fmt.Errorf("%w: %d bytes after the last global", ErrMalformed, len(p)-r.off))
	}
	if r.err != nil {
		return 0, r.wrapped()
	}
	return uint64(n), nil
}

// checkExports validates the export section so that an entry can be appended to it.
func checkExports(p []byte) error {
	r := &reader{b: p}
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.name()
		r.byte()
		r.u32()
	}
	if r.err == nil && r.off != len(p) {
		r.fail(fmt.Errorf("%w: %d bytes after the last export", ErrMalformed, len(p)-r.off))
	}
	if r.err != nil {
		return r.wrapped()
	}
	return nil
}

// countImports returns how many globals and memories a module imports.
func countImports(p []byte) (globals, memories uint64, err error) {
	r := &reader{b: p}
	c, _ := r.imports(r.u32(), nil)
	if r.err != nil {
		return 0, 0, r.wrapped()
	}
	return uint64(c.globals), uint64(c.memories), nil
}

// instrumentCode rewrites the payload of the code section.
func instrumentCode(p []byte, check []byte) ([]byte, error) {
	r := &reader{b: p}
	n := r.u32()
	if r.err != nil {
		return nil, r.wrapped()
	}
	out := wasmenc.AppendULEB128(make([]byte, 0, len(p)+len(p)/16+16), uint64(n))
	var body []byte
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		start := r.off
		if r.err == nil && uint64(size) > uint64(len(p)-start) {
			r.fail(fmt.Errorf("%w: body of %d bytes overruns the section", ErrMalformed, size))
		}
		if r.err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, r.wrapped())
		}
		fr := &reader{b: p[start : start+int(size)]}
		var err error
		body, err = instrumentBody(body[:0], fr, check)
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = wasmenc.AppendULEB128(out, uint64(len(body)))
		out = append(out, body...)
		r.off = start + int(size)
	}
	if r.off != len(p) {
		return nil, fmt.Errorf("%w: %d bytes after the last function body", ErrMalformed, len(p)-r.off)
	}
	return out, nil
}

func instrumentBody(out []byte, r *reader, check []byte) ([]byte, error) {
	groups := r.u32()
	for i := uint32(0); i < groups && r.err == nil; i++ {
		r.u32()
		r.valType()
	}
	if r.err != nil {
		return nil, fmt.Errorf("locals: %w", r.wrapped())
	}
	out = append(out, r.b[:r.off]...)
	out = append(out, check...)
	for r.off < len(r.b) {
		start := r.off
		op := r.instruction()
		if r.err != nil {
			return nil, fmt.Errorf("instruction at body offset %d (opcode 0x%02x): %w", start, r.b[start], r.wrapped())
		}
		out = append(out, r.b[start:r.off]...)
		if op == opLoop {
			out = append(out, check...)
		}
	}
	if len(r.b) == 0 || r.b[len(r.b)-1] != 0x0b {
		return nil, fmt.Errorf("%w: body does not end with `end`", ErrMalformed)
	}
	return out, nil
}

// reader decodes from b; the first error sticks and later reads return zero.
// It records in used the proposals past WebAssembly 2.0 whose types and
// instructions it reads (see Proposals).
type reader struct {
	b    []byte
	off  int
	err  error
	used Proposal
	// refSelect is set by a `select` typed with a typed reference
	// ((ref null? ht), see CheckLimitsAndSelect).
	refSelect bool
}

func (r *reader) use(p Proposal) { r.used |= p }

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) wrapped() error {
	if errors.Is(r.err, ErrUnsupported) || errors.Is(r.err, ErrMalformed) {
		return r.err
	}
	return fmt.Errorf("%w: %v", ErrMalformed, r.err)
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail(errors.New("unexpected end"))
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) skip(n int) {
	if r.err != nil {
		return
	}
	if n > len(r.b)-r.off {
		r.fail(errors.New("unexpected end"))
		return
	}
	r.off += n
}

// leb reads an unsigned or signed LEB128 of at most bits bits and returns its
// raw unsigned value and, for signed reads, whether it is negative.
func (r *reader) leb(bits uint, signed bool) (uint64, bool) {
	var v uint64
	var shift uint
	maxBytes := int((bits + 6) / 7)
	for i := 0; i < maxBytes; i++ {
		c := r.byte()
		if r.err != nil {
			return 0, false
		}
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			neg := signed && c&0x40 != 0
			if neg && shift < 64 {
				v |= ^uint64(0) << shift
			}
			return v, neg
		}
	}
	r.fail(fmt.Errorf("LEB128 integer longer than %d bytes", maxBytes))
	return 0, false
}

func (r *reader) u32() uint32 {
	v, _ := r.leb(32, false)
	if v > 1<<32-1 {
		r.fail(errors.New("u32 out of range"))
	}
	return uint32(v)
}

func (r *reader) name() {
	n := r.u32()
	r.skip(int(n))
}

// limits reads the limits of a table or memory, records the proposals its
// flags belong to (threads' shared, memory64's 64-bit indexes,
// custom-page-sizes' page size), and returns the flags and the minimum (the
// initial size).
func (r *reader) limits() (flags byte, min uint64) {
	flags = r.byte()
	if r.err != nil {
		return 0, 0
	}
	if flags&0x02 != 0 {
		r.use(ProposalThreads)
	}
	if flags&0x04 != 0 {
		r.use(ProposalMemory64)
	}
	if flags&0x08 != 0 {
		r.use(ProposalCustomPageSizes)
	}
	if flags > 7 {
		r.fail(fmt.Errorf("%w: limits flags 0x%02x", ErrUnsupported, flags))
		return flags, 0
	}
	min, _ = r.leb(64, false)
	if flags&1 != 0 {
		r.leb(64, false)
	}
	return flags, min
}

func isValType(c byte) bool {
	switch c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return true
	}
	return false
}

// Reference type prefixes of the function-references proposal: (ref null ht)
// and (ref ht), each followed by a heap type.
const (
	refNull = 0x63
	ref     = 0x64
)

// valType reads a value type: a number, vector or reference type, including
// the typed references of function-references ((ref null? ht)).
func (r *reader) valType() {
	c := r.byte()
	switch {
	case r.err != nil:
	case c == refNull || c == ref:
		r.use(ProposalFunctionReferences)
		r.heapType()
	case isValType(c):
	default:
		r.useValType(c)
		r.fail(fmt.Errorf("%w: value type 0x%02x", ErrUnsupported, c))
	}
}

// refType reads a reference type (a table's element type).
func (r *reader) refType() {
	r.valType()
}

// heapType reads the heap type of a typed reference: func, extern or a type
// index. The abstract heap types of gc and exception-handling are recorded
// and refused.
func (r *reader) heapType() {
	if r.err != nil {
		return
	}
	if r.off < len(r.b) {
		switch c := r.b[r.off]; c {
		case 0x70, 0x6f: // func, extern
			r.off++
			return
		default:
			if c >= 0x40 && c < 0x80 { // a negative one-byte s33: an abstract heap type
				r.off++
				r.useValType(c)
				r.fail(fmt.Errorf("%w: heap type 0x%02x", ErrUnsupported, c))
				return
			}
		}
	}
	if _, neg := r.leb(33, true); neg && r.err == nil {
		r.fail(fmt.Errorf("%w: heap type", ErrUnsupported))
	}
}

// useValType records the proposal a value or heap type byte belongs to.
func (r *reader) useValType(c byte) {
	switch c {
	case 0x6e, 0x6d, 0x6c, 0x6b, 0x6a, 0x71, 0x72, 0x73: // any, eq, i31, struct, array, none, noextern, nofunc
		r.use(ProposalGC)
	case 0x69, 0x74: // exn, noexn
		r.use(ProposalExceptionHandling)
	}
}

func (r *reader) blockType() {
	if r.err != nil {
		return
	}
	if r.off < len(r.b) {
		c := r.b[r.off]
		if c == 0x40 || isValType(c) {
			r.off++
			return
		}
		if c == refNull || c == ref {
			r.valType()
			return
		}
	}
	_, neg := r.leb(33, true)
	if neg {
		r.useValType(r.b[r.off-1])
		r.fail(fmt.Errorf("%w: block type 0x%02x", ErrUnsupported, r.b[r.off-1]))
	}
}

func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 {
		r.use(ProposalMultiMemory)
		r.u32() // memory index (multi-memory)
	}
	r.leb(64, false) // offset (u64 for memory64)
}

// instruction decodes one instruction and returns its opcode.
func (r *reader) instruction() byte {
	op := r.byte()
	switch {
	case op <= 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b:
		// unreachable, nop, else, end, return, drop, select
	case op == 0x0a, op == 0x19: // throw_ref, catch_all
		r.use(ProposalExceptionHandling)
	case op == 0x02, op == 0x03, op == 0x04: // block, loop, if
		r.blockType()
	case op == 0x06: // try
		r.use(ProposalExceptionHandling)
		r.blockType()
	case op == 0x0c, op == 0x0d, op == 0x10: // br, br_if (label), call (func)
		r.u32()
	case op == 0x07, op == 0x08, op == 0x09, op == 0x18:
		// catch, throw (tag), rethrow, delegate (label)
		r.use(ProposalExceptionHandling)
		r.u32()
	case op == 0x12: // return_call (func)
		r.use(ProposalTailCall)
		r.u32()
	case op == 0x14: // call_ref (type)
		r.use(ProposalFunctionReferences)
		r.u32()
	case op == 0x15: // return_call_ref (type)
		r.use(ProposalTailCall | ProposalFunctionReferences)
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11: // call_indirect: type, table
		r.u32()
		r.u32()
	case op == 0x13: // return_call_indirect: type, table
		r.use(ProposalTailCall)
		r.u32()
		r.u32()
	case op == 0x1c: // select t*
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			if r.off < len(r.b) && (r.b[r.off] == ref || r.b[r.off] == refNull) {
				r.refSelect = true
			}
			r.valType()
		}
	case op == 0x1f: // try_table
		r.use(ProposalExceptionHandling)
		r.blockType()
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			switch k := r.byte(); k {
			case 0, 1:
				r.u32()
				r.u32()
			case 2, 3:
				r.u32()
			default:
				r.fail(fmt.Errorf("%w: try_table catch kind %d", ErrUnsupported, k))
			}
		}
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x3f, op == 0x40: // memory.size, memory.grow
		if r.u32() != 0 {
			r.use(ProposalMultiMemory)
		}
	case op == 0x41:
		r.leb(32, true)
	case op == 0x42:
		r.leb(64, true)
	case op == 0x43:
		r.skip(4)
	case op == 0x44:
		r.skip(8)
	case op >= 0x45 && op <= 0xc4: // numeric and sign extension
	case op == 0xd0: // ref.null heaptype
		r.heapType()
	case op == 0xd1: // ref.is_null
	case op == 0xd2: // ref.func
		r.u32()
	case op == 0xd3: // ref.eq
		r.use(ProposalGC)
		r.fail(fmt.Errorf("%w: ref.eq (gc)", ErrUnsupported))
	case op == 0xd4: // ref.as_non_null
		r.use(ProposalFunctionReferences)
	case op == 0xd5, op == 0xd6: // br_on_null, br_on_non_null (label)
		r.use(ProposalFunctionReferences)
		r.u32()
	case op == 0xfb:
		r.use(ProposalGC)
		r.fail(fmt.Errorf("%w: gc instruction 0xfb", ErrUnsupported))
	case op == 0xfc:
		r.prefixFC()
	case op == 0xfd:
		r.prefixFD()
	case op == 0xfe:
		r.use(ProposalThreads)
		r.prefixFE()
	default:
		if r.err == nil {
			r.fail(fmt.Errorf("%w: unknown opcode 0x%02x", ErrUnsupported, op))
		}
	}
	return op
}

func (r *reader) prefixFC() {
	switch sub := r.u32(); {
	case r.err != nil:
	case sub <= 7: // saturating truncation
	case sub == 8: // memory.init data, mem
		r.u32()
		r.u32()
	case sub == 9, sub == 13: // data.drop, elem.drop
		r.u32()
	case sub == 10, sub == 12, sub == 14: // memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	case sub == 11, sub == 15, sub == 16, sub == 17: // memory.fill, table.grow/size/fill
		r.u32()
	case sub >= 19 && sub <= 22: // i64.add128, i64.sub128, i64.mul_wide_s/u
		r.use(ProposalWideArithmetic)
		r.fail(fmt.Errorf("%w: wide-arithmetic opcode 0xfc %d", ErrUnsupported, sub))
	default:
		r.fail(fmt.Errorf("%w: unknown opcode 0xfc %d", ErrUnsupported, sub))
	}
}

func (r *reader) prefixFD() {
	switch sub := r.u32(); {
	case r.err != nil:
	case sub <= 11, sub == 92, sub == 93: // v128 loads and stores
		r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		r.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane / replace_lane
		r.byte()
	case sub >= 84 && sub <= 91: // load/store lane
		r.memarg()
		r.byte()
	case sub >= 0x100 && sub <= 0x113: // relaxed SIMD, no immediate
		r.use(ProposalRelaxedSIMD)
	case sub <= 0xff: // everything else has no immediate
	default:
		r.fail(fmt.Errorf("%w: unknown opcode 0xfd %d", ErrUnsupported, sub))
	}
}

func (r *reader) prefixFE() {
	switch sub := r.u32(); {
	case r.err != nil:
	case sub <= 2, sub >= 0x10 && sub <= 0x4e: // atomic.notify, wait, loads, stores, rmw
		r.memarg()
	case sub == 3: // atomic.fence
		r.byte()
	default:
		r.fail(fmt.Errorf("%w: unknown opcode 0xfe %d", ErrUnsupported, sub))
	}
}
