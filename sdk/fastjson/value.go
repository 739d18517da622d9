package fastjson

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// Kind is the JSON type of a Value.
type Kind uint8

// The kinds of Values. Missing is the kind of a value that is not there
// (an absent key, an index out of range, malformed input).
const (
	Missing Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

// Value is one JSON value inside a document: a view of its bytes, cheap to
// copy. The zero Value is missing.
type Value struct {
	d    *document
	s, e int
}

// document is the parsed bytes and their index: for every offset where a
// value (or key) starts, the length of that value, so that skipping a value
// of any size is one lookup. Lengths rather than end offsets: most are
// small numbers, which a conservative collector such as TinyGo's cannot
// mistake for pointers into the guest's heap. (Measured, this alone did not
// change the heap's growth on a list of 1,000 Ingresses; the garbage of a
// fresh index per call did, which Parser removes.)
type document struct {
	b    []byte
	ends []int32
}

// ErrSyntax: the document is not one JSON value.
var ErrSyntax = errors.New("fastjson: invalid JSON")

// Parse checks that data is one JSON value (surrounding whitespace allowed),
// with json.Valid's rules, indexes it in the same pass, and returns it. The
// index takes four bytes per byte of data; data must not change while its
// Values are in use.
func Parse(data []byte) (Value, error) {
	return parse(&document{b: data, ends: make([]int32, len(data))})
}

// Parser parses documents one after the other into the same index, grown as
// needed and never freed: a policy that parses a large document (a list of
// a thousand objects from a host call) on every evaluation allocates its
// index once instead of on every call, which keeps a TinyGo guest's heap,
// and so its linear memory, from growing with the garbage. The Values of a
// document are valid until the Parser's next Parse. The zero Parser is
// ready to use; a Parser must not be used by two goroutines at once.
type Parser struct {
	ends []int32
}

// Parse is Parse with p's index.
func (p *Parser) Parse(data []byte) (Value, error) {
	if cap(p.ends) < len(data) {
		p.ends = make([]int32, len(data))
	}
	// Stale entries need no clearing: the index is read only where the
	// validation that fills it found a value or a key.
	return parse(&document{b: data, ends: p.ends[:len(data)]})
}

func parse(d *document) (Value, error) {
	if len(d.b) > math.MaxInt32 {
		return Value{}, ErrSyntax
	}
	sc := scanner{b: d.b, lens: d.ends}
	s, e, ok := sc.document()
	if !ok {
		return Value{}, ErrSyntax
	}
	return Value{d: d, s: s, e: e}, nil
}

// Kind is the value's JSON type, Missing when it is not there.
func (v Value) Kind() Kind {
	if v.e <= v.s {
		return Missing
	}
	switch v.d.b[v.s] {
	case '{':
		return Object
	case '[':
		return Array
	case '"':
		return String
	case 't', 'f':
		return Bool
	case 'n':
		return Null
	}
	return Number
}

// Exists reports whether the value is there.
func (v Value) Exists() bool { return v.e > v.s }

// IsNull reports whether the value is missing or null, which decoding into
// a Go value does not tell apart.
func (v Value) IsNull() bool { k := v.Kind(); return k == Missing || k == Null }

// Raw is the value's bytes in the document (nil when missing).
func (v Value) Raw() []byte {
	if !v.Exists() {
		return nil
	}
	return v.d.b[v.s:v.e]
}

// Get follows a path of object keys: v.Get("spec", "containers") is
// v["spec"]["containers"]. It is missing as soon as a step is not an object
// or lacks the key.
func (v Value) Get(keys ...string) Value {
	for _, k := range keys {
		v = v.member(k)
	}
	return v
}

// member is the value of the last member of object v named key. Like Index,
// it walks the index directly rather than through ForEachMember's callback:
// TinyGo allocates a closure that captures a result on every call, and a
// policy calls these for every field it reads.
func (v Value) member(key string) Value {
	var found Value
	if v.Kind() != Object {
		return found
	}
	b, ends := v.d.b, v.d.ends
	i := SkipSpace(b, v.s+1)
	for b[i] == '"' {
		kend := i + int(ends[i])
		vs := SkipSpace(b, SkipSpace(b, kend)+1) // after the ':'
		ve := vs + int(ends[vs])
		if (Value{d: v.d, s: i, e: kend}).Equals(key) {
			found = Value{d: v.d, s: vs, e: ve}
		}
		i = SkipSpace(b, ve)
		if b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
	return found
}

// Iter walks the elements of an array or the members of an object in a
// plain loop, without ForEach's callback (TinyGo allocates a closure that
// captures variables on every call: for a list of a thousand items, once per
// item):
//
//	it := v.Iter()
//	for it.Next() {
//		elem := it.Value() // it.Key() too for an object's member
//	}
//
// Declare the Iter before the loop, not in its init statement: since Go
// 1.22 a variable declared there is a new variable in every iteration, and
// TinyGo puts each one on the heap (its address is taken by Next), an
// allocation per element.
type Iter struct {
	d      *document
	i      int  // where the next element or member starts
	close  byte // ']' or '}'; 0 when there is nothing to walk
	key, v Value
}

// Iter starts a walk of array or object v; for other kinds Next is false at
// once.
func (v Value) Iter() Iter {
	switch v.Kind() {
	case Array:
		return Iter{d: v.d, i: SkipSpace(v.d.b, v.s+1), close: ']'}
	case Object:
		return Iter{d: v.d, i: SkipSpace(v.d.b, v.s+1), close: '}'}
	}
	return Iter{}
}

// Next moves to the next element or member and reports whether there is
// one.
func (it *Iter) Next() bool {
	if it.close == 0 {
		return false
	}
	b, ends := it.d.b, it.d.ends
	i := it.i
	if b[i] == it.close {
		it.close = 0
		it.key, it.v = Value{}, Value{}
		return false
	}
	if it.close == '}' {
		kend := i + int(ends[i])
		it.key = Value{d: it.d, s: i, e: kend}
		i = SkipSpace(b, SkipSpace(b, kend)+1) // after the ':'
	}
	end := i + int(ends[i])
	it.v = Value{d: it.d, s: i, e: end}
	i = SkipSpace(b, end)
	if b[i] == ',' {
		i = SkipSpace(b, i+1)
	}
	it.i = i
	return true
}

// Value is the current element, or the current member's value.
func (it *Iter) Value() Value { return it.v }

// Key is the current member's key (a String value); missing in an array.
func (it *Iter) Key() Value { return it.key }

// Index is the i-th element of array v (missing when out of range).
func (v Value) Index(i int) Value {
	if v.Kind() != Array || i < 0 {
		return Value{}
	}
	n := 0
	it := v.Iter()
	for ; it.Next(); n++ {
		if n == i {
			return it.Value()
		}
	}
	return Value{}
}

// Len is the number of elements of an array or members of an object
// (duplicate keys counted each time), 0 for other kinds.
func (v Value) Len() int {
	n := 0
	it := v.Iter()
	for it.Next() {
		n++
	}
	return n
}

// ForEach calls fn with each element of array v, in order, until fn returns
// false. It does nothing when v is not an array.
func (v Value) ForEach(fn func(i int, elem Value) bool) {
	if v.Kind() != Array {
		return
	}
	b, ends := v.d.b, v.d.ends
	i := SkipSpace(b, v.s+1)
	for n := 0; b[i] != ']'; n++ {
		end := i + int(ends[i])
		if !fn(n, Value{d: v.d, s: i, e: end}) {
			return
		}
		i = SkipSpace(b, end)
		if b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
}

// ForEachMember calls fn with the key (a String value) and the value of each
// member of object v, in order, until fn returns false. It does nothing when
// v is not an object.
func (v Value) ForEachMember(fn func(key, val Value) bool) {
	if v.Kind() != Object {
		return
	}
	b, ends := v.d.b, v.d.ends
	i := SkipSpace(b, v.s+1)
	for b[i] == '"' {
		kend := i + int(ends[i])
		vs := SkipSpace(b, SkipSpace(b, kend)+1) // after the ':'
		ve := vs + int(ends[vs])
		if !fn(Value{d: v.d, s: i, e: kend}, Value{d: v.d, s: vs, e: ve}) {
			return
		}
		i = SkipSpace(b, ve)
		if b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
}

// Str is the text of a String value, decoded as encoding/json decodes it.
func (v Value) Str() (string, bool) {
	if v.Kind() != String {
		return "", false
	}
	body := v.d.b[v.s+1 : v.e-1]
	if plain(body) {
		return string(body), true
	}
	return string(unquote(body)), true
}

// Equals reports whether v is a String whose text is s. It allocates
// nothing when the string has no escapes (in TinyGo too).
func (v Value) Equals(s string) bool {
	if v.Kind() != String {
		return false
	}
	body := v.d.b[v.s+1 : v.e-1]
	if plain(body) {
		return equalBytes(body, s)
	}
	return string(unquote(body)) == s
}

// equalBytes is string(b) == s without the conversion, which TinyGo
// compiles to an allocation and a copy (Go's compiler does not): a guest
// compares a key this way for every member it looks up.
func equalBytes(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if b[i] != s[i] {
			return false
		}
	}
	return true
}

// Bool is the value of true or false.
func (v Value) Bool() (value, ok bool) {
	switch string(v.Raw()) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// Int is a Number that is an integer in int64's range.
func (v Value) Int() (int64, bool) {
	if v.Kind() != Number {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v.Raw()), 10, 64)
	return n, err == nil
}

// Float is a Number as a float64.
func (v Value) Float() (float64, bool) {
	if v.Kind() != Number {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v.Raw()), 64)
	return f, err == nil
}

// plain reports whether a string body decodes to itself: no escapes and
// valid UTF-8.
func plain(body []byte) bool {
	ascii := true
	for _, c := range body {
		if c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(body)
}
