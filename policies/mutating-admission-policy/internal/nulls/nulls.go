// Package nulls makes the null-valued members of a mutated object agree with
// the request's object, for both MutatingAdmissionPolicy engines (package
// engine on typed objects, package jsonengine on JSON, the TinyGo built-in):
// test/mapdiff compares the host's patch with the one Kubernetes' plugin's
// result gives (referencePatch), where a null member and an absent one are
// the same object to the apiserver and the request decides which to send.
package nulls

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Prune makes null-valued keys of the result agree with the request's
// object: a null key the object did not have is dropped, and a null key the
// object had (creationTimestamp: null, as the apiserver sends it) is kept even
// when the typed encoding omits it, so that the host's diff holds only what
// the policy changed.
//
// It runs on nearly every mutation (typed encodings hold
// `creationTimestamp: null`), so it works on the bytes: one pass over the
// original builds a skeleton of its objects' keys, one pass over the result
// copies it, dropping and adding null members. Neither pass decodes a value
// or goes through encoding/json's scanner (one indirect call per byte, slow
// in Wasm). Keys are compared as they are spelled; if either document has an
// escaped key, or does not parse, the general decoding version does it.
func Prune(result []byte, original json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(result, []byte("null")) && !bytes.Contains(original, []byte("null")) {
		return result, nil
	}
	if out, err := pruneBytes(result, original); err == nil {
		return out, nil
	}
	return pruneDecoded(result, original)
}

// pruneDecoded is Prune through encoding/json.
func pruneDecoded(result []byte, original json.RawMessage) (json.RawMessage, error) {
	var r, o any
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, err
	}
	_ = json.Unmarshal(original, &o)
	r = prune(r, o)
	return json.Marshal(r)
}

func prune(r, o any) any {
	switch rv := r.(type) {
	case map[string]any:
		om, _ := o.(map[string]any)
		for k, ov := range om {
			if _, has := rv[k]; !has && ov == nil {
				rv[k] = nil
			}
		}
		for k, v := range rv {
			ov, had := om[k]
			if v == nil && !had {
				delete(rv, k)
				continue
			}
			rv[k] = prune(v, ov)
		}
		return rv
	case []any:
		ol, _ := o.([]any)
		for i := range rv {
			var ov any
			if i < len(ol) {
				ov = ol[i]
			}
			rv[i] = prune(rv[i], ov)
		}
		return rv
	default:
		return r
	}
}

// skeleton is what pruning needs of one original value: for an object its
// keys (raw, quoted) with their values' skeletons and which are null, for an
// array its items' skeletons. Scalars have a nil skeleton; a null value has
// nullSkeleton.
type skeleton struct {
	keys  map[string]skelKey
	order []string // keys in document order (the null ones are re-added in it)
	items []*skeleton
}

// skelKey is one key of an original object: its value's skeleton and its
// index in order.
type skelKey struct {
	s *skeleton
	i int
}

var nullSkeleton = &skeleton{}

var errNotPlain = errors.New("not plain JSON for the byte-level pruning")

type jsonReader struct {
	b []byte
	i int
}

func (r *jsonReader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// str reads a string; it fails on escapes when noEscapes (keys).
func (r *jsonReader) str(noEscapes bool) ([]byte, error) {
	start := r.i
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return nil, errNotPlain
	}
	for r.i++; r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; {
		case c == '"':
			r.i++
			if noEscapes && !utf8.Valid(r.b[start:r.i]) {
				// encoding/json reads invalid UTF-8 as U+FFFD: keys
				// spelled differently could be the same key.
				return nil, errNotPlain
			}
			return r.b[start:r.i], nil
		case c == '\\':
			if noEscapes {
				return nil, errNotPlain
			}
			r.i++
		case c < 0x20:
			return nil, errNotPlain
		}
	}
	return nil, errNotPlain
}

// scalar reads a number or a literal; null is reported.
func (r *jsonReader) scalar() (isNull bool, err error) {
	start := r.i
	for r.i < len(r.b) {
		c := r.b[r.i]
		if isDelim(c) {
			break
		}
		if c == '"' || c == '{' || c == '[' || c == ':' {
			return false, errNotPlain
		}
		r.i++
	}
	if r.i == start {
		return false, errNotPlain
	}
	return string(r.b[start:r.i]) == "null", nil
}

// open reads the '{' or '[' at r.i and reports whether the container is
// empty (its close, read too, follows).
func (r *jsonReader) open(close byte) bool {
	r.i++
	r.space()
	if r.i < len(r.b) && r.b[r.i] == close {
		r.i++
		return true
	}
	return false
}

// key reads an object member's key and its ':' (keys have no escapes).
func (r *jsonReader) key() ([]byte, error) {
	r.space()
	k, err := r.str(true)
	if err != nil {
		return nil, err
	}
	r.space()
	if r.i >= len(r.b) || r.b[r.i] != ':' {
		return nil, errNotPlain
	}
	r.i++
	return k, nil
}

// next reads what follows a member or an element: more after ',', !more
// after close (the container ends).
func (r *jsonReader) next(close byte) (more bool, err error) {
	r.space()
	if r.i >= len(r.b) {
		return false, errNotPlain
	}
	c := r.b[r.i]
	r.i++
	switch c {
	case ',':
		return true, nil
	case close:
		return false, nil
	}
	return false, errNotPlain
}

// skel reads one value of the original into its skeleton.
func (r *jsonReader) skel(depth int) (*skeleton, error) {
	if depth > 10000 {
		return nil, errNotPlain
	}
	r.space()
	if r.i >= len(r.b) {
		return nil, errNotPlain
	}
	switch r.b[r.i] {
	case '{':
		s := &skeleton{keys: map[string]skelKey{}}
		for more := !r.open('}'); more; {
			k, err := r.key()
			if err != nil {
				return nil, err
			}
			v, err := r.skel(depth + 1)
			if err != nil {
				return nil, err
			}
			if _, dup := s.keys[string(k)]; dup {
				return nil, errNotPlain // encoding/json keeps the last one; leave it to it
			}
			key := string(k) // one copy for the map and the order
			s.keys[key] = skelKey{v, len(s.order)}
			s.order = append(s.order, key)
			if more, err = r.next('}'); err != nil {
				return nil, err
			}
		}
		return s, nil
	case '[':
		s := &skeleton{items: []*skeleton{}}
		for more := !r.open(']'); more; {
			v, err := r.skel(depth + 1)
			if err != nil {
				return nil, err
			}
			s.items = append(s.items, v)
			if more, err = r.next(']'); err != nil {
				return nil, err
			}
		}
		return s, nil
	case '"':
		_, err := r.str(false)
		return nil, err
	default:
		isNull, err := r.scalar()
		if isNull {
			return nullSkeleton, err
		}
		return nil, err
	}
}

// copyPruned copies one value of the result to out, pruning its objects
// against the original's skeleton o (nil when the original had no container
// there).
func (r *jsonReader) copyPruned(out []byte, o *skeleton, depth int) ([]byte, error) {
	if depth > 10000 {
		return nil, errNotPlain
	}
	r.space()
	if r.i >= len(r.b) {
		return nil, errNotPlain
	}
	switch r.b[r.i] {
	case '{':
		out = append(out, '{')
		first := true
		// The keys met, for duplicates: the original's by their index, the
		// others by name.
		var seen []bool
		var seenOther map[string]bool
		if o != nil && o.keys != nil {
			seen = make([]bool, len(o.order))
		}
		for more := !r.open('}'); more; {
			k, err := r.key()
			if err != nil {
				return nil, err
			}
			r.space()
			var child *skeleton
			had := false
			if o != nil && o.keys != nil {
				var sk skelKey
				if sk, had = o.keys[string(k)]; had {
					if seen[sk.i] {
						return nil, errNotPlain // duplicate key
					}
					seen[sk.i] = true
					child = sk.s
				} else {
					if seenOther[string(k)] {
						return nil, errNotPlain // duplicate key
					}
					if seenOther == nil {
						seenOther = map[string]bool{}
					}
					seenOther[string(k)] = true
				}
			}
			if r.i+4 <= len(r.b) && string(r.b[r.i:r.i+4]) == "null" && (r.i+4 == len(r.b) || isDelim(r.b[r.i+4])) {
				r.i += 4
				if had {
					out = appendMember(out, &first, k)
					out = append(out, "null"...)
				}
			} else {
				out = appendMember(out, &first, k)
				if out, err = r.copyPruned(out, child, depth+1); err != nil {
					return nil, err
				}
			}
			if more, err = r.next('}'); err != nil {
				return nil, err
			}
		}
		// The original's null keys the result lacks.
		if o != nil {
			for i, k := range o.order {
				if o.keys[k].s == nullSkeleton && !seen[i] {
					out = appendMember(out, &first, []byte(k))
					out = append(out, "null"...)
				}
			}
		}
		return append(out, '}'), nil
	case '[':
		out = append(out, '[')
		for n, more := 0, !r.open(']'); more; n++ {
			var child *skeleton
			if o != nil && n < len(o.items) {
				child = o.items[n]
			}
			if n > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = r.copyPruned(out, child, depth+1); err != nil {
				return nil, err
			}
			if more, err = r.next(']'); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case '"':
		s, err := r.str(false)
		if err != nil {
			return nil, err
		}
		return append(out, s...), nil
	default:
		start := r.i
		if _, err := r.scalar(); err != nil {
			return nil, err
		}
		return append(out, r.b[start:r.i]...), nil
	}
}

func isDelim(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func appendMember(out []byte, first *bool, key []byte) []byte {
	if !*first {
		out = append(out, ',')
	}
	*first = false
	out = append(out, key...)
	return append(out, ':')
}

// pruneBytes is Prune on the bytes; it fails (errNotPlain) on
// anything it does not handle exactly like pruneDecoded: escaped or
// duplicate keys, malformed JSON.
func pruneBytes(result []byte, original []byte) ([]byte, error) {
	var o *skeleton
	if len(bytes.TrimSpace(original)) > 0 {
		or := &jsonReader{b: original}
		var err error
		if o, err = or.skel(0); err != nil {
			return nil, err
		}
		or.space()
		if or.i != len(original) {
			return nil, errNotPlain
		}
	}
	rr := &jsonReader{b: result}
	out, err := rr.copyPruned(make([]byte, 0, len(result)+32), o, 0)
	if err != nil {
		return nil, err
	}
	rr.space()
	if rr.i != len(result) {
		return nil, errNotPlain
	}
	return out, nil
}
