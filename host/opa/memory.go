package opa

import (
	"errors"
	"fmt"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/wasmenc"
)

// The sections this file reads or writes.
const (
	secImport = 2
	secMemory = 5
)

// minPages is the smallest memory an instance gets, in 64 KiB pages: what
// Kubewarden's burrego makes (5 pages, no maximum).
const minPages = 5

// defineMemory makes the host's `env.memory` of an OPA module: it rewrites the
// import of `env`.`memory` into a memory the module defines, of at least
// minPages pages (more if the module asks for more) and no maximum, so that
// each instance has its own memory, capped by the allocator its instance is
// created with. wazero resolves imports by module name, one module per name,
// so a host memory imported by several instances at once cannot be made
// otherwise. A module that does not import `env`.`memory` is refused.
func defineMemory(code []byte) ([]byte, error) {
	secs, err := wasmbin.Sections(code)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(code)+16)
	out = append(out, code[:len(wasmbin.Magic)]...)
	found := false
	lastEarly := -1 // index of the last type/import/function/table section
	for i, s := range secs {
		if s.ID >= 1 && s.ID <= 4 {
			lastEarly = i
		}
		if s.ID == secMemory {
			return nil, errors.New("the module defines its own memory; an OPA module imports env.memory")
		}
	}
	var memPages uint64
	for i, s := range secs {
		if s.ID == secImport && !found {
			payload, pages, ok, err := dropMemoryImport(s.Payload)
			if err != nil {
				return nil, err
			}
			if ok {
				found, memPages = true, pages
				out = wasmenc.AppendSection(out, secImport, payload)
				if i == lastEarly {
					out = appendMemory(out, memPages)
				}
				continue
			}
		}
		out = append(out, code[s.Start:s.End]...)
		if i == lastEarly && found {
			out = appendMemory(out, memPages)
		}
	}
	if !found {
		return nil, errors.New("the module does not import env.memory, as every module built by opa build -t wasm does")
	}
	return out, nil
}

// appendMemory appends a memory section of one memory with at least pages
// pages and no maximum.
func appendMemory(out []byte, pages uint64) []byte {
	pages = max(pages, minPages)
	body := wasmenc.AppendULEB128([]byte{1, 0x00}, pages)
	return wasmenc.AppendSection(out, secMemory, body)
}

// dropMemoryImport removes the `env`.`memory` entry from an import section
// and returns its minimum size in pages.
func dropMemoryImport(p []byte) (payload []byte, pages uint64, found bool, err error) {
	count, n, err := wasmenc.ReadULEB128(p)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%w: import section: %v", wasmbin.ErrMalformed, err)
	}
	rest := p[n:]
	var kept [][]byte
	for i := uint64(0); i < count; i++ {
		start := rest
		mod, r, err := name(rest)
		if err != nil {
			return nil, 0, false, err
		}
		field, r, err := name(r)
		if err != nil || len(r) < 1 {
			return nil, 0, false, fmt.Errorf("%w: import %d truncated", wasmbin.ErrMalformed, i)
		}
		kind := r[0]
		r = r[1:]
		var min uint64
		switch kind {
		case 0: // function: type index
			_, n, err = wasmenc.ReadULEB128(r)
			r = r[n:]
		case 1: // table: reftype, limits
			if len(r) < 1 {
				return nil, 0, false, fmt.Errorf("%w: import %d truncated", wasmbin.ErrMalformed, i)
			}
			_, r, err = limits(r[1:])
		case 2: // memory: limits
			min, r, err = limits(r)
		case 3: // global: valtype, mutability
			if len(r) < 2 {
				return nil, 0, false, fmt.Errorf("%w: import %d truncated", wasmbin.ErrMalformed, i)
			}
			r = r[2:]
		default:
			return nil, 0, false, fmt.Errorf("%w: import %s.%s of kind %d", wasmbin.ErrMalformed, mod, field, kind)
		}
		if err != nil {
			return nil, 0, false, fmt.Errorf("%w: import %s.%s: %v", wasmbin.ErrMalformed, mod, field, err)
		}
		entry := start[:len(start)-len(r)]
		rest = r
		if kind == 2 && mod == "env" && field == "memory" {
			found, pages = true, min
			continue
		}
		if kind == 2 {
			return nil, 0, false, fmt.Errorf("the module imports memory %s.%s; an OPA module imports env.memory", mod, field)
		}
		kept = append(kept, entry)
	}
	if len(rest) != 0 {
		return nil, 0, false, fmt.Errorf("%w: %d bytes after the imports", wasmbin.ErrMalformed, len(rest))
	}
	payload = wasmenc.AppendULEB128(nil, uint64(len(kept)))
	for _, e := range kept {
		payload = append(payload, e...)
	}
	return payload, pages, found, nil
}

// limits reads a limits structure (flag 0: min; 1: min, max; shared and
// 64-bit memories are refused) and returns its minimum.
func limits(p []byte) (uint64, []byte, error) {
	if len(p) < 1 {
		return 0, nil, errors.New("truncated limits")
	}
	flag := p[0]
	if flag > 1 {
		return 0, nil, fmt.Errorf("unsupported limits flag %#x (shared or 64-bit memory)", flag)
	}
	min, n, err := wasmenc.ReadULEB128(p[1:])
	if err != nil {
		return 0, nil, err
	}
	p = p[1+n:]
	if flag == 1 {
		_, n, err = wasmenc.ReadULEB128(p)
		if err != nil {
			return 0, nil, err
		}
		p = p[n:]
	}
	return min, p, nil
}

// name reads an import's module or field name.
func name(p []byte) (string, []byte, error) {
	s, rest, err := wasmenc.ReadName(p)
	if err != nil {
		return "", nil, fmt.Errorf("%w: name: %v", wasmbin.ErrMalformed, err)
	}
	return s, rest, nil
}
