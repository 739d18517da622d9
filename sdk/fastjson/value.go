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
// value (or key) starts, the offset where it ends, so that skipping a value
// of any size is one lookup.
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
	d := &document{b: data, ends: make([]int32, len(data))}
	s := skipWS(data, 0)
	e, ok := validValue(data, d.ends, s, 0)
	if !ok || skipWS(data, e) != len(data) || len(data) > math.MaxInt32 {
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

// member is the value of the last member of object v named key.
func (v Value) member(key string) Value {
	var found Value
	v.ForEachMember(func(k, val Value) bool {
		if k.Equals(key) {
			found = val
		}
		return true
	})
	return found
}

// Index is the i-th element of array v (missing when out of range).
func (v Value) Index(i int) Value {
	var found Value
	v.ForEach(func(j int, elem Value) bool {
		if j == i {
			found = elem
			return false
		}
		return true
	})
	return found
}

// Len is the number of elements of an array or members of an object
// (duplicate keys counted each time), 0 for other kinds.
func (v Value) Len() int {
	n := 0
	switch v.Kind() {
	case Array:
		v.ForEach(func(int, Value) bool { n++; return true })
	case Object:
		v.ForEachMember(func(Value, Value) bool { n++; return true })
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
	i := skipWS(b, v.s+1)
	for n := 0; b[i] != ']'; n++ {
		end := int(ends[i])
		if !fn(n, Value{d: v.d, s: i, e: end}) {
			return
		}
		i = skipWS(b, end)
		if b[i] == ',' {
			i = skipWS(b, i+1)
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
	i := skipWS(b, v.s+1)
	for b[i] == '"' {
		kend := int(ends[i])
		vs := skipWS(b, skipWS(b, kend)+1) // after the ':'
		ve := int(ends[vs])
		if !fn(Value{d: v.d, s: i, e: kend}, Value{d: v.d, s: vs, e: ve}) {
			return
		}
		i = skipWS(b, ve)
		if b[i] == ',' {
			i = skipWS(b, i+1)
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
// nothing when the string has no escapes.
func (v Value) Equals(s string) bool {
	if v.Kind() != String {
		return false
	}
	body := v.d.b[v.s+1 : v.e-1]
	if plain(body) {
		return string(body) == s
	}
	return string(unquote(body)) == s
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

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}
