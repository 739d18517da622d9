package admission

import (
	"bytes"
	"slices"
	"strconv"
	"sync"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// This file is Diff's fast path: it walks the raw bytes of both documents
// once, skips every subtree whose bytes are equal on both sides, and only
// looks inside the subtrees that differ. It never decodes a document into
// map[string]any and never uses reflection. Its output is byte for byte what
// diffDecoded (the reference: decode both, compare with reflect.DeepEqual,
// encode with encoding/json) returns; whenever the input is anything but
// plain well-formed JSON (trailing data, nesting deeper than encoding/json
// accepts, a syntax error) it gives up and the reference runs instead, so
// errors and odd inputs behave exactly as before.

// maxRawBytes is the largest document the fast path indexes (its index takes
// four bytes per byte of document); larger ones go to the reference.
const maxRawBytes = 8 << 20

// jdoc is one document and its fastjson.Index: for every byte offset where a
// value starts, the length of the value, so that skipping a value of any
// size is one lookup, and for strings whether they hold a backslash or a
// non-ASCII byte (whether their decoded text may differ from their bytes).
// Building it validates the document.
type jdoc struct {
	b []byte
	x fastjson.Index
}

// end is the offset where the value or key starting at offset i ends.
func (d *jdoc) end(i int) int { return i + int(d.x.Len[i]) }

// escaped reports whether the string starting at offset i holds a backslash
// or a non-ASCII byte.
func (d *jdoc) escaped(i int) bool { return d.x.Escaped[i] }

// val is one value of a document: d.b[s:e].
type val struct {
	d    *jdoc
	s, e int
}

func (v val) bytes() []byte { return v.d.b[v.s:v.e] }
func (v val) first() byte   { return v.d.b[v.s] }

// member is one member of a JSON object: its decoded key and its value.
type member struct {
	key []byte
	v   val
}

// rawDiffer holds the scratch space of one diff; it is pooled.
type rawDiffer struct {
	a, b  jdoc
	ext   jdoc // diffRawIndexed's modified document, indexed by its caller
	out   []byte
	ops   int
	path  []byte
	mems  []member
	elems []val
}

var differs = sync.Pool{New: func() any { return new(rawDiffer) }}

// diffRaw is the fast path of Diff. ok is false when the documents must go to
// the reference implementation instead.
func diffRaw(original, modified []byte) (patch []byte, ok bool) {
	if len(original) > maxRawBytes || len(modified) > maxRawBytes {
		return nil, false
	}
	d := differs.Get().(*rawDiffer)
	defer differs.Put(d)
	a, okA := d.a.index(original)
	b, okB := d.b.index(modified)
	if !okA || !okB {
		return nil, false
	}
	return d.diff(a, b)
}

// diffRawIndexed is diffRaw with the modified document given as the value
// doc[s:e] that x indexes.
func diffRawIndexed(original, doc []byte, x *fastjson.Index, s, e int) (patch []byte, ok bool) {
	if len(original) > maxRawBytes || e-s > maxRawBytes {
		return nil, false
	}
	d := differs.Get().(*rawDiffer)
	defer differs.Put(d)
	a, okA := d.a.index(original)
	if !okA {
		return nil, false
	}
	d.ext = jdoc{b: doc, x: *x}
	defer func() { d.ext = jdoc{} }() // the pool must not keep the caller's index
	return d.diff(a, val{d: &d.ext, s: s, e: e})
}

// diff writes the patch from a to b.
func (d *rawDiffer) diff(a, b val) (patch []byte, ok bool) {
	d.out = append(d.out[:0], '[')
	d.ops = 0
	d.path = d.path[:0]
	d.mems = d.mems[:0]
	d.elems = d.elems[:0]
	if !d.diffValue(a, b) {
		return nil, false
	}
	if d.ops == 0 {
		return nil, true
	}
	d.out = append(d.out, ']')
	return bytes.Clone(d.out), true
}

// index validates data as exactly one JSON value (surrounding whitespace
// allowed) and indexes it; ok is false for anything else (empty, trailing
// data, a syntax error, too deep).
func (d *jdoc) index(data []byte) (v val, ok bool) {
	d.b = data
	s, e, ok := d.x.Scan(data)
	if !ok {
		return val{}, false
	}
	return val{d: d, s: s, e: e}, true
}

func (d *rawDiffer) diffValue(a, b val) bool {
	if bytes.Equal(a.bytes(), b.bytes()) {
		return true
	}
	switch {
	case a.first() == '{' && b.first() == '{':
		return d.diffObject(a, b)
	case a.first() == '[' && b.first() == '[':
		return d.diffArray(a, b)
	}
	if d.equal(a, b) {
		return true
	}
	return d.op("replace", b)
}

func (d *rawDiffer) diffObject(a, b val) bool {
	base := len(d.mems)
	defer func() { d.mems = d.mems[:base] }()
	ma, mb := d.members(a), d.members(b)
	plen := len(d.path)
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		var c int
		switch {
		case i == len(ma):
			c = 1
		case j == len(mb):
			c = -1
		default:
			c = bytes.Compare(ma[i].key, mb[j].key)
		}
		var ok bool
		switch {
		case c < 0:
			d.pushKey(ma[i].key)
			ok = d.op("remove", val{})
			i++
		case c > 0:
			d.pushKey(mb[j].key)
			ok = d.op("add", mb[j].v)
			j++
		default:
			d.pushKey(ma[i].key)
			ok = d.diffValue(ma[i].v, mb[j].v)
			i++
			j++
		}
		d.path = d.path[:plen]
		if !ok {
			return false
		}
	}
	return true
}

func (d *rawDiffer) diffArray(a, b val) bool {
	base := len(d.elems)
	defer func() { d.elems = d.elems[:base] }()
	ea, eb := d.elements(a), d.elements(b)
	pre := 0
	for pre < len(ea) && pre < len(eb) && d.equal(ea[pre], eb[pre]) {
		pre++
	}
	suf := 0
	for suf < len(ea)-pre && suf < len(eb)-pre && d.equal(ea[len(ea)-1-suf], eb[len(eb)-1-suf]) {
		suf++
	}
	ma, mb := ea[pre:len(ea)-suf], eb[pre:len(eb)-suf]
	n := min(len(ma), len(mb))
	plen := len(d.path)
	for i := 0; i < n; i++ {
		d.pushIndex(pre + i)
		ok := d.diffValue(ma[i], mb[i])
		d.path = d.path[:plen]
		if !ok {
			return false
		}
	}
	for i := n; i < len(ma); i++ { // removals: the index stays put as elements shift left
		d.pushIndex(pre + n)
		d.op("remove", val{})
		d.path = d.path[:plen]
	}
	for i := n; i < len(mb); i++ {
		d.pushIndex(pre + i)
		ok := d.op("add", mb[i])
		d.path = d.path[:plen]
		if !ok {
			return false
		}
	}
	return true
}

// equal is reflect.DeepEqual of the two values as encoding/json decodes them
// (numbers as json.Number, duplicate keys: the last wins).
func (d *rawDiffer) equal(a, b val) bool {
	if bytes.Equal(a.bytes(), b.bytes()) {
		return true
	}
	if a.first() != b.first() { // different kinds, or different numbers or literals
		return false
	}
	switch a.first() {
	case '{':
		base := len(d.mems)
		defer func() { d.mems = d.mems[:base] }()
		ma, mb := d.members(a), d.members(b)
		if len(ma) != len(mb) {
			return false
		}
		for i := range ma {
			if !bytes.Equal(ma[i].key, mb[i].key) || !d.equal(ma[i].v, mb[i].v) {
				return false
			}
		}
		return true
	case '[':
		base := len(d.elems)
		defer func() { d.elems = d.elems[:base] }()
		ea, eb := d.elements(a), d.elements(b)
		if len(ea) != len(eb) {
			return false
		}
		for i := range ea {
			if !d.equal(ea[i], eb[i]) {
				return false
			}
		}
		return true
	case '"':
		if !a.d.escaped(a.s) && !b.d.escaped(b.s) {
			return false
		}
		return string(fastjson.Unquote(a.bytes())) == string(fastjson.Unquote(b.bytes()))
	}
	// Numbers (json.Number keeps the literal) and true/false/null: equal
	// only when their bytes are.
	return false
}

// members appends the members of the object o to d.mems and returns them
// sorted by key, keeping only the last of duplicate keys (as decoding into a
// map does).
func (d *rawDiffer) members(o val) []member {
	base := len(d.mems)
	b := o.d.b
	i := fastjson.SkipSpace(b, o.s+1)
	for b[i] != '}' {
		kend := o.d.end(i)
		key := b[i+1 : kend-1]
		if o.d.escaped(i) {
			key = fastjson.Unquote(b[i:kend])
		}
		i = fastjson.SkipSpace(b, kend)  // at ':'
		vs := fastjson.SkipSpace(b, i+1) // the value
		ve := o.d.end(vs)
		d.mems = append(d.mems, member{key: key, v: val{d: o.d, s: vs, e: ve}})
		i = fastjson.SkipSpace(b, ve) // at ',' or '}'
		if b[i] == ',' {
			i = fastjson.SkipSpace(b, i+1)
		}
	}
	ms := d.mems[base:]
	if !slices.IsSortedFunc(ms, compareMembers) {
		slices.SortStableFunc(ms, compareMembers)
	}
	// Duplicate keys: keep the last one.
	w := 0
	for r := range ms {
		if r+1 < len(ms) && bytes.Equal(ms[r].key, ms[r+1].key) {
			continue
		}
		ms[w] = ms[r]
		w++
	}
	d.mems = d.mems[:base+w]
	return d.mems[base:]
}

func compareMembers(x, y member) int { return bytes.Compare(x.key, y.key) }

// elements appends the elements of the array a to d.elems and returns them.
func (d *rawDiffer) elements(a val) []val {
	base := len(d.elems)
	b := a.d.b
	i := fastjson.SkipSpace(b, a.s+1)
	for b[i] != ']' {
		end := a.d.end(i)
		d.elems = append(d.elems, val{d: a.d, s: i, e: end})
		i = fastjson.SkipSpace(b, end)
		if b[i] == ',' {
			i = fastjson.SkipSpace(b, i+1)
		}
	}
	return d.elems[base:]
}

// pushKey appends "/" and the RFC 6901-escaped key to the current path.
func (d *rawDiffer) pushKey(k []byte) {
	d.path = append(d.path, '/')
	for _, c := range k {
		switch c {
		case '~':
			d.path = append(d.path, '~', '0')
		case '/':
			d.path = append(d.path, '~', '1')
		default:
			d.path = append(d.path, c)
		}
	}
}

func (d *rawDiffer) pushIndex(i int) {
	d.path = append(d.path, '/')
	d.path = strconv.AppendInt(d.path, int64(i), 10)
}

// op appends one operation at the current path, in Operation.MarshalJSON's form.
func (d *rawDiffer) op(name string, value val) bool {
	if d.ops > 0 {
		d.out = append(d.out, ',')
	}
	d.ops++
	d.out = append(d.out, `{"op":"`...)
	d.out = append(d.out, name...)
	d.out = append(d.out, `","path":`...)
	d.out = fastjson.AppendQuoteBytes(d.out, d.path)
	if name != "remove" {
		d.out = append(d.out, `,"value":`...)
		d.out = d.appendCanonical(d.out, value)
	}
	d.out = append(d.out, '}')
	return true
}

// appendCanonical appends v as encoding/json encodes the value it decodes to:
// no whitespace, object keys sorted, duplicates dropped, strings escaped the
// way json.Marshal escapes them, numbers as written.
func (d *rawDiffer) appendCanonical(dst []byte, v val) []byte {
	switch v.first() {
	case '{':
		base := len(d.mems)
		defer func() { d.mems = d.mems[:base] }()
		dst = append(dst, '{')
		for i, m := range d.members(v) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = fastjson.AppendQuoteBytes(dst, m.key)
			dst = append(dst, ':')
			dst = d.appendCanonical(dst, m.v)
		}
		return append(dst, '}')
	case '[':
		base := len(d.elems)
		defer func() { d.elems = d.elems[:base] }()
		dst = append(dst, '[')
		for i, e := range d.elements(v) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = d.appendCanonical(dst, e)
		}
		return append(dst, ']')
	case '"':
		if !v.d.escaped(v.s) {
			return fastjson.AppendQuoteBytes(dst, v.bytes()[1:v.e-v.s-1])
		}
		return fastjson.AppendQuoteBytes(dst, fastjson.Unquote(v.bytes()))
	}
	return append(dst, v.bytes()...)
}
