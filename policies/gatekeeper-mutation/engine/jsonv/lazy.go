package jsonv

import (
	"strconv"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// Lazy reading: a request's object is checked whole, as Parse checks it,
// but read into Values only where the engine looks. A value not read yet
// is a Raw Value: an object or an array whose bytes are known good.
// Reading it (load) makes its members Values, each object or array among
// them Raw in its turn; an array's elements are read one level at once, so
// that code iterating A sees their kinds. The accessors (Get, Field, At,
// Equal, SameJSON, the encoders, DeepCopy, TypeName) read what they touch;
// code that ranges over Obj.Vals of a request's object calls At or LoadAll
// instead. Encode copies a Raw value's bytes as they are: the parts of the
// object no mutator reached are neither decoded nor encoded again.

// doc is a document read lazily: its parser (the bytes, the number mode,
// the slabs the loads allocate from) and the index the check made.
type doc struct {
	p parser
	// lens[i] is the length of the object or array whose '{' or '[' is at
	// offset i; the entries at other offsets are stale.
	lens []int32
	// rounded: the check met a number whose float64 may not be its
	// decimal value (see value).
	rounded bool
}

// Reader reads documents lazily, reusing its index from one document to
// the next: the Values of a document read with it must not be used after
// its next read. The zero Reader is ready; a Reader must not serve two
// goroutines at once.
type Reader struct {
	lens []int32
}

// ParseLazy is Parse, the value read lazily (see Reader).
func ParseLazy(data []byte, mode NumberMode) (*Value, error) {
	var r Reader
	return r.Parse(data, mode)
}

// Parse is Parse with r's index: the whole of data is checked, its top
// value read one level.
func (r *Reader) Parse(data []byte, mode NumberMode) (*Value, error) {
	d := r.doc(data, mode, string(data))
	return d.p.whole(d.value)
}

func (r *Reader) doc(data []byte, mode NumberMode, src string) *doc {
	if cap(r.lens) < len(data) {
		r.lens = make([]int32, len(data))
	}
	return &doc{p: parser{d: data, mode: mode, src: src}, lens: r.lens[:len(data)]}
}

// value reads the value at d.p.i lazily and leaves d.p.i after it. When the
// check fails, the eager parser reads it again for its error.
func (d *doc) value() (*Value, error) {
	p := &d.p
	start := p.i
	end, ok := d.check(start, 0)
	if !ok || d.rounded {
		// A failed check: the parser says what is wrong. A number that
		// float64 rounds: read everything, so that the answer holds the
		// number as the engine holds it (as Gatekeeper's encoding would),
		// not its bytes.
		return p.value(0)
	}
	v := d.member()
	if v.K == Raw {
		v.load()
	}
	p.i = end
	return v, nil
}

// check checks the value at b[i] with Parse's rules (RFC 8259 syntax,
// valid escapes, numbers in range, at most maxDepth levels) and returns
// its end, recording the lengths of objects and arrays.
func (d *doc) check(i, depth int) (int, bool) {
	b := d.p.d
	if depth > maxDepth || i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		j := fastjson.SkipSpace(b, i+1)
		if j < len(b) && b[j] == closer {
			d.lens[i] = int32(j + 1 - i)
			return j + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if j >= len(b) || b[j] != '"' {
					return 0, false
				}
				if j, ok = checkString(b, j); !ok {
					return 0, false
				}
				j = fastjson.SkipSpace(b, j)
				if j >= len(b) || b[j] != ':' {
					return 0, false
				}
				j = fastjson.SkipSpace(b, j+1)
			}
			if j, ok = d.check(j, depth+1); !ok {
				return 0, false
			}
			j = fastjson.SkipSpace(b, j)
			if j >= len(b) {
				return 0, false
			}
			if b[j] == ',' {
				j = fastjson.SkipSpace(b, j+1)
				continue
			}
			if b[j] == closer {
				d.lens[i] = int32(j + 1 - i)
				return j + 1, true
			}
			return 0, false
		}
	case c == '"':
		return checkString(b, i)
	case c == 't':
		return checkLiteral(b, i, "true")
	case c == 'f':
		return checkLiteral(b, i, "false")
	case c == 'n':
		return checkLiteral(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		end, ok := checkNumber(b, i)
		if ok && end-i > 15 && !shortInteger(b[i:end]) {
			d.rounded = true
		}
		return end, ok
	}
	return 0, false
}

// shortInteger reports whether a number literal is an integer of at most
// 18 digits (an int64, read exactly); a longer literal or one with a
// fraction or an exponent may be read as a float64 that is not its
// decimal value.
func shortInteger(lit []byte) bool {
	if lit[0] == '-' {
		lit = lit[1:]
	}
	return len(lit) <= 18 && digitsEnd(lit, 0) == len(lit)
}

func checkLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// checkString returns the end of the string at b[i], with the parser's
// rules (no control characters, valid escapes), which are sdk/fastjson's.
func checkString(b []byte, i int) (int, bool) {
	end, _, ok := fastjson.ScanString(b, i)
	return end, ok
}

// checkNumber returns the end of the number at b[i], refusing what the
// parser refuses: a literal strconv.ParseFloat finds out of range. Only a
// literal with an exponent or of 300 bytes or more can be.
func checkNumber(b []byte, i int) (int, bool) {
	start, exp := i, false
	if i >= len(b) {
		return 0, false
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digitsEnd(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		if i = digitsEnd(b, i+1); b[i-1] == '.' {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exp = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		s := i
		if i = digitsEnd(b, i); i == s {
			return 0, false
		}
	}
	if exp || i-start >= 300 {
		if _, err := strconv.ParseFloat(string(b[start:i]), 64); err != nil {
			// An integer that fits int64 is never out of range; one that does
			// not is read as a float, as the parser does.
			return 0, false
		}
	}
	return i, true
}

// digitsEnd is the end of the digits from b[i] on.
func digitsEnd(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// member reads the value at d.p.i, checked: an object or an array as a
// Raw Value, anything else parsed.
func (d *doc) member() *Value {
	p := &d.p
	switch at := p.i; p.d[at] {
	case '{', '[':
		p.i += int(d.lens[at])
		v := p.newValue()
		v.K, v.I, v.rd = Raw, int64(at), d
		return v
	}
	v, err := p.value(0)
	if err != nil {
		// Checked: cannot happen.
		return p.newValue()
	}
	return v
}

// raw is the bytes of a Raw value.
func (v *Value) raw() []byte {
	at := int(v.I)
	return v.rd.p.d[at : at+int(v.rd.lens[at])]
}

// load reads a Raw value one level, in place (the Value keeps its
// address); an array's elements are read one level too.
func (v *Value) load() {
	d, at := v.rd, int(v.I)
	p := &d.p
	p.i = at + 1
	p.ws()
	base := len(p.stack)
	if p.d[at] == '{' {
		if p.d[p.i] != '}' {
			for {
				k, _ := p.str()
				p.ws()
				p.i++ // ':'
				p.ws()
				v2 := d.member()
				p.keys = append(p.keys, k)
				p.stack = append(p.stack, v2)
				p.ws()
				if p.d[p.i] != ',' {
					break
				}
				p.i++
				p.ws()
			}
		}
		*v = Value{K: Object, O: p.endObj(base)}
		return
	}
	if p.d[p.i] != ']' {
		for {
			p.keys = append(p.keys, "")
			p.stack = append(p.stack, d.member())
			p.ws()
			if p.d[p.i] != ',' {
				break
			}
			p.i++
			p.ws()
		}
	}
	p.keys = p.keys[:base]
	a := p.endArr(base)
	*v = Value{K: Array, A: a}
	for _, e := range a {
		if e.K == Raw {
			e.load()
		}
	}
}

// Load reads v where it is not read yet (one level; see Reader).
func (v *Value) Load() *Value {
	if v != nil && v.K == Raw {
		v.load()
	}
	return v
}

// LoadAll reads everything below v, for code that ranges over its members.
func LoadAll(v *Value) {
	if v == nil {
		return
	}
	if v.K == Raw {
		v.load()
	}
	switch v.K {
	case Object:
		for _, e := range v.O.Vals {
			LoadAll(e)
		}
	case Array:
		for _, e := range v.A {
			LoadAll(e)
		}
	}
}

// At is the value of the i-th key, read.
func (o *Obj) At(i int) *Value { return o.Vals[i].Load() }
