package wasmbin

import (
	"sort"

	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

const (
	sectionData      = 11
	sectionDataCount = 12
)

// MergeData rewrites a module whose data section holds many small active
// segments (a standard-Go wasip1 module has tens of thousands: wazero
// evaluates each one's offset and copies it at every instantiation, about
// 2 ms for 38,000 segments) into one segment per run of segments separated by
// at most maxGap bytes, the gaps filled with zeros. The memory image after
// instantiation is the same: segments are applied in their order (a later one
// overwrites an earlier one where they overlap), the memory is the module's
// own (not imported) so it starts zeroed, and every merged segment ends where
// its last original segment ends, so a segment out of bounds still fails the
// instantiation.
//
// The module is returned unchanged (merged false) when the rewrite is not
// sure to be exact or buys nothing: no data section or fewer than two
// segments, a data count section (memory.init/data.drop name segments by
// index), passive segments or offsets other than i32.const, or an imported
// memory.
func MergeData(wasm []byte, maxGap int) (out []byte, merged bool, err error) {
	secs, err := Sections(wasm)
	if err != nil {
		return nil, false, err
	}
	data := -1
	for i, s := range secs {
		switch s.ID {
		case sectionDataCount:
			return wasm, false, nil
		case sectionImport:
			_, memories, err := countImports(s.Payload)
			if err != nil || memories > 0 {
				return wasm, false, err
			}
		case sectionData:
			data = i
		}
	}
	if data < 0 {
		return wasm, false, nil
	}
	segs, ok := dataSegments(secs[data].Payload)
	if !ok || len(segs) < 2 {
		return wasm, false, nil
	}
	payload := mergeSegments(segs, maxGap)
	out = make([]byte, 0, len(wasm)+len(payload)-len(secs[data].Payload))
	out = append(out, wasm[:secs[data].Start]...)
	out = wasmenc.AppendSection(out, sectionData, payload)
	out = append(out, wasm[secs[data].End:]...)
	return out, true, nil
}

type dataSegment struct {
	off   uint64
	bytes []byte
	index int
}

// dataSegments parses a data section whose segments are all active, for
// memory 0, at an i32.const offset; ok is false otherwise.
func dataSegments(p []byte) (segs []dataSegment, ok bool) {
	r := &reader{b: p}
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		if flag := r.u32(); flag != 0 || r.err != nil {
			return nil, false
		}
		if r.byte() != 0x41 { // i32.const
			return nil, false
		}
		v, neg := r.leb(32, true)
		if r.byte() != 0x0b || r.err != nil || neg {
			return nil, false
		}
		l := r.u32()
		start := r.off
		r.skip(int(l))
		if r.err != nil {
			return nil, false
		}
		segs = append(segs, dataSegment{off: uint64(uint32(v)), bytes: p[start:r.off], index: int(i)})
	}
	if r.err != nil || r.off != len(p) {
		return nil, false
	}
	return segs, true
}

// mergeSegments groups segments (sorted by offset) whose gaps are at most
// maxGap, writes each group's bytes in the segments' original order, and
// returns the new data section payload.
func mergeSegments(segs []dataSegment, maxGap int) []byte {
	sorted := append([]dataSegment(nil), segs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].off < sorted[j].off })
	type group struct {
		start, end uint64
		buf        []byte
	}
	var groups []*group
	groupOf := make([]*group, len(segs))
	for _, s := range sorted {
		end := s.off + uint64(len(s.bytes))
		if g := lastGroup(groups); g != nil && s.off <= g.end+uint64(maxGap) {
			g.end = max(g.end, end)
			groupOf[s.index] = g
			continue
		}
		g := &group{start: s.off, end: end}
		groups = append(groups, g)
		groupOf[s.index] = g
	}
	for _, g := range groups {
		g.buf = make([]byte, g.end-g.start)
	}
	for _, s := range segs { // original order: later segments win
		g := groupOf[s.index]
		copy(g.buf[s.off-g.start:], s.bytes)
	}
	var p []byte
	p = wasmenc.AppendULEB128(p, uint64(len(groups)))
	for _, g := range groups {
		p = append(p, 0, 0x41)
		p = appendSleb(p, int64(int32(uint32(g.start))))
		p = append(p, 0x0b)
		p = wasmenc.AppendULEB128(p, uint64(len(g.buf)))
		p = append(p, g.buf...)
	}
	return p
}

func lastGroup[T any](gs []*T) *T {
	if len(gs) == 0 {
		return nil
	}
	return gs[len(gs)-1]
}
