package admission

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
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

// maxDepth is encoding/json's nesting limit; deeper documents go to the reference.
const maxDepth = 10000

// maxRawBytes is the largest document the fast path indexes (its index takes
// four bytes per byte of document); larger ones go to the reference.
const maxRawBytes = 8 << 20

// jdoc is one document and its index: for every byte offset where a value
// starts, ends holds the offset where it ends, so that skipping a value of
// any size is one lookup. Building it validates the document.
type jdoc struct {
	b    []byte
	ends []int32
	// flag marks strings holding a backslash or a non-ASCII byte (their
	// decoded text may differ from their bytes).
	flag []bool
}

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
	if cap(d.ends) < len(data) {
		d.ends = make([]int32, len(data))
		d.flag = make([]bool, len(data))
	}
	d.ends = d.ends[:len(data)]
	d.flag = d.flag[:len(data)]
	i := skipWS(data, 0)
	end, ok := d.value(i, 0)
	if !ok || skipWS(data, end) != len(data) {
		return val{}, false
	}
	return val{d: d, s: i, e: end}, true
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
		if !a.d.flag[a.s] && !b.d.flag[b.s] {
			return false
		}
		return string(decodeString(a.bytes())) == string(decodeString(b.bytes()))
	}
	// Numbers (json.Number keeps the literal) and true/false/null: equal
	// only when their bytes are.
	return false
}

// decodeString returns the text of the quoted string q as encoding/json
// decodes it (escapes resolved, invalid UTF-8 replaced).
func decodeString(q []byte) []byte {
	if body := q[1 : len(q)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return body
	}
	var s string
	_ = json.Unmarshal(q, &s) // q was validated by index
	return []byte(s)
}

// members appends the members of the object o to d.mems and returns them
// sorted by key, keeping only the last of duplicate keys (as decoding into a
// map does).
func (d *rawDiffer) members(o val) []member {
	base := len(d.mems)
	b := o.d.b
	i := skipWS(b, o.s+1)
	for b[i] != '}' {
		kend := int(o.d.ends[i])
		key := b[i+1 : kend-1]
		if o.d.flag[i] {
			key = decodeString(b[i:kend])
		}
		i = skipWS(b, kend)  // at ':'
		vs := skipWS(b, i+1) // the value
		ve := int(o.d.ends[vs])
		d.mems = append(d.mems, member{key: key, v: val{d: o.d, s: vs, e: ve}})
		i = skipWS(b, ve) // at ',' or '}'
		if b[i] == ',' {
			i = skipWS(b, i+1)
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
	i := skipWS(b, a.s+1)
	for b[i] != ']' {
		end := int(a.d.ends[i])
		d.elems = append(d.elems, val{d: a.d, s: i, e: end})
		i = skipWS(b, end)
		if b[i] == ',' {
			i = skipWS(b, i+1)
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
	d.out = appendJSONString(d.out, d.path)
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
			dst = appendJSONString(dst, m.key)
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
		if !v.d.flag[v.s] {
			return appendJSONString(dst, v.bytes()[1:v.e-v.s-1])
		}
		return appendJSONString(dst, decodeString(v.bytes()))
	}
	return append(dst, v.bytes()...)
}

// appendJSONString appends s (decoded text) quoted as json.Marshal quotes a string.
func appendJSONString(dst, s []byte) []byte {
	if !needsEscape(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(string(s)) // a string always marshals
	return append(dst, b...)
}

// needsEscape reports whether json.Marshal would write s other than as is
// between quotes: control characters, quote, backslash, <, >, &, non-ASCII.
func needsEscape(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return true
		}
	}
	return false
}

var isWS = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// stopsString marks the bytes a string scan must look at: the closing quote,
// a backslash, control characters (invalid) and non-ASCII bytes (flagged).
var stopsString = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c < 0x20 || c >= 0x80 || c == '"' || c == '\\'
	}
	return t
}()

func skipWS(d []byte, i int) int {
	for i < len(d) {
		// Indentation: eight spaces at a time.
		if i+8 <= len(d) && binary.LittleEndian.Uint64(d[i:]) == 0x2020202020202020 {
			i += 8
			continue
		}
		if !isWS[d[i]] {
			break
		}
		i++
	}
	return i
}

// The SWAR tests below look at eight bytes at once (x is eight bytes, little endian).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasByte reports whether one of the bytes of x is c.
func hasByte(x uint64, c byte) bool {
	v := x ^ (ones * uint64(c))
	return (v-ones)&^v&highs != 0
}

// plainRun reports whether none of the eight bytes of x stops a string scan:
// no quote, backslash, control character or non-ASCII byte.
func plainRun(x uint64) bool {
	return x&highs == 0 && (x-ones*0x20)&^x&highs == 0 && !hasByte(x, '"') && !hasByte(x, '\\')
}

// value checks the syntax of the value starting at b[i], records its end in
// the index and returns it.
func (d *jdoc) value(i, depth int) (int, bool) {
	b := d.b
	if i >= len(b) {
		return 0, false
	}
	start := i
	var end int
	var ok bool
	switch c := b[i]; {
	case c == '{':
		if depth >= maxDepth {
			return 0, false
		}
		end, ok = d.object(i, depth)
	case c == '[':
		if depth >= maxDepth {
			return 0, false
		}
		end, ok = d.array(i, depth)
	case c == '"':
		end, ok = d.str(i)
	case c == 't':
		end, ok = literalEnd(b, i, "true")
	case c == 'f':
		end, ok = literalEnd(b, i, "false")
	case c == 'n':
		end, ok = literalEnd(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		end, ok = numberEnd(b, i)
	}
	if !ok {
		return 0, false
	}
	d.ends[start] = int32(end)
	return end, true
}

func (d *jdoc) object(i, depth int) (int, bool) {
	b := d.b
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		end, ok := d.str(i)
		if !ok {
			return 0, false
		}
		d.ends[i] = int32(end)
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i, ok = d.value(skipWS(b, i+1), depth+1); !ok {
			return 0, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, false
		}
		if b[i] == '}' {
			return i + 1, true
		}
		if b[i] != ',' {
			return 0, false
		}
		i = skipWS(b, i+1)
	}
}

func (d *jdoc) array(i, depth int) (int, bool) {
	b := d.b
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = d.value(i, depth+1); !ok {
			return 0, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, false
		}
		if b[i] == ']' {
			return i + 1, true
		}
		if b[i] != ',' {
			return 0, false
		}
		i = skipWS(b, i+1)
	}
}

// str returns the index after the closing quote of the string at b[i] and
// flags the string when it holds a backslash or a non-ASCII byte.
func (d *jdoc) str(i int) (int, bool) {
	b := d.b
	start := i
	flag := false
	for i++; ; i++ {
		for i+8 <= len(b) && plainRun(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && !stopsString[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			d.flag[start] = flag
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c >= 0x80:
			flag = true
		case c == '\\':
			flag = true
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 {
					return 0, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 4
			default:
				return 0, false
			}
		}
	}
}

func literalEnd(d []byte, i int, lit string) (int, bool) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// numberEnd returns the end of the number at d[i] (RFC 8259 grammar).
func numberEnd(d []byte, i int) (int, bool) {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return 0, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		s := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == s {
			return 0, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		s := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == s {
			return 0, false
		}
	}
	return i, true
}
