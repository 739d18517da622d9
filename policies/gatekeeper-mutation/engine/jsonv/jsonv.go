// Package jsonv is a small, reflection-free JSON tree: a parser, an encoder,
// deep copy and the two equalities Gatekeeper's mutation system relies on.
//
// Numbers keep the Go type Gatekeeper would hold for them: a request object is
// decoded like k8s.io/apimachinery's unstructured JSON (an integer literal that
// fits int64 is Int, anything else Float), a mutator's assign.value like
// encoding/json into interface{} (always Float). Equal compares like
// github.com/google/go-cmp (Int and Float are different types), SameJSON
// compares JSON values (numbers as float64), as a JSON patch would.
//
// Objects are shared by pointer (like Go maps), arrays by value (like Go
// slices): the mutators rely on both.
//
// A Reader reads a document lazily (lazy.go): checked whole, decoded where
// the accessors reach, the rest copied by Encode as it came.
//
// It must NOT know about Kubernetes, Gatekeeper or Wasm.
package jsonv

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// Kind is the JSON type of a Value (with Int and Float apart).
type Kind uint8

// The kinds of Value.
const (
	Null Kind = iota
	Bool
	Int
	Float
	String
	Array
	Object
	// Raw is an object or an array of a document read lazily, not read
	// yet (lazy.go): the accessors read it when they reach it.
	Raw
)

// Value is one JSON value.
type Value struct {
	K Kind
	B bool
	// NilArray marks an Array that is a Go nil slice (encoded as null,
	// different from an empty array under Equal). Next to K and B, the
	// three share a word (a request's tree is hundreds of Values).
	NilArray bool
	I        int64
	F        float64
	S        string
	// A holds an Array's elements.
	A []*Value
	O *Obj
	// rd is the document of a Raw value, which is at offset I.
	rd *doc
}

// Obj is a JSON object; keys keep their first insertion order.
type Obj struct {
	Keys []string
	Vals []*Value
}

// ErrSyntax: the input is not JSON.
var ErrSyntax = errors.New("invalid JSON")

// NewString, NewObject, NewArray and NewInt build values.
func NewString(s string) *Value  { return &Value{K: String, S: s} }
func NewObject() *Value          { return &Value{K: Object, O: &Obj{}} }
func NewArray(a []*Value) *Value { return &Value{K: Array, A: a} }
func NewInt(i int64) *Value      { return &Value{K: Int, I: i} }
func NewFloat(f float64) *Value  { return &Value{K: Float, F: f} }
func NewBool(b bool) *Value      { return &Value{K: Bool, B: b} }
func (o *Obj) Len() int          { return len(o.Keys) }
func (v *Value) IsObject() bool  { return v != nil && v.K == Object }
func (v *Value) IsArray() bool   { return v != nil && v.K == Array }
func (v *Value) IsString() bool  { return v != nil && v.K == String }
func (o *Obj) index(k string) int {
	for i, key := range o.Keys {
		if key == k {
			return i
		}
	}
	return -1
}

// Get returns the value of key k.
func (o *Obj) Get(k string) (*Value, bool) {
	if i := o.index(k); i >= 0 {
		return o.Vals[i].Load(), true
	}
	return nil, false
}

// Set sets key k to v.
func (o *Obj) Set(k string, v *Value) {
	if i := o.index(k); i >= 0 {
		o.Vals[i] = v
		return
	}
	o.Keys = append(o.Keys, k)
	o.Vals = append(o.Vals, v)
}

// Delete removes key k.
func (o *Obj) Delete(k string) {
	if i := o.index(k); i >= 0 {
		o.Keys = append(o.Keys[:i], o.Keys[i+1:]...)
		o.Vals = append(o.Vals[:i], o.Vals[i+1:]...)
	}
}

// Field returns the value at key k of object v, or nil.
func (v *Value) Field(k string) *Value {
	if v == nil || v.K != Object {
		return nil
	}
	f, _ := v.O.Get(k)
	return f
}

// Str returns v as a string when it is one.
func (v *Value) Str() (string, bool) {
	if v == nil || v.K != String {
		return "", false
	}
	return v.S, true
}

// DeepCopy copies v and everything below it.
func (v *Value) DeepCopy() *Value {
	if v == nil {
		return nil
	}
	switch v.K {
	case Object:
		o := &Obj{Keys: make([]string, len(v.O.Keys)), Vals: make([]*Value, len(v.O.Vals))}
		copy(o.Keys, v.O.Keys)
		for i, c := range v.O.Vals {
			o.Vals[i] = c.DeepCopy()
		}
		return &Value{K: Object, O: o}
	case Array:
		if v.A == nil {
			return &Value{K: Array, NilArray: v.NilArray}
		}
		a := make([]*Value, len(v.A))
		for i, c := range v.A {
			a[i] = c.DeepCopy()
		}
		return &Value{K: Array, A: a}
	}
	c := *v
	return &c
}

// Equal reports whether a and b are equal as go-cmp compares Go JSON values:
// Int and Float differ, a nil array differs from an empty one, key order
// does not matter.
func Equal(a, b *Value) bool {
	if a == nil || b == nil {
		return a == b
	}
	a.Load()
	b.Load()
	if a.K != b.K {
		return false
	}
	switch a.K {
	case Null:
		return true
	case Bool:
		return a.B == b.B
	case Int:
		return a.I == b.I
	case Float:
		return a.F == b.F
	case String:
		return a.S == b.S
	case Array:
		if a.NilArray != b.NilArray {
			return false
		}
		if len(a.A) != len(b.A) {
			return false
		}
		for i := range a.A {
			if !Equal(a.A[i], b.A[i]) {
				return false
			}
		}
		return true
	case Object:
		if len(a.O.Keys) != len(b.O.Keys) {
			return false
		}
		for i, k := range a.O.Keys {
			bv, ok := b.O.Get(k)
			if !ok || !Equal(a.O.At(i), bv) {
				return false
			}
		}
		return true
	}
	return false
}

// SameJSON reports whether a and b encode the same JSON value, numbers
// compared as float64 (what a JSON patch between them would see).
func SameJSON(a, b *Value) bool {
	if a == nil || b == nil {
		return a == b
	}
	a.Load()
	b.Load()
	an, bn := a.K == Int || a.K == Float, b.K == Int || b.K == Float
	if an && bn {
		return a.Float64() == b.Float64()
	}
	ak, bk := a.K, b.K
	if ak == Array && a.NilArray {
		ak = Null
	}
	if bk == Array && b.NilArray {
		bk = Null
	}
	if ak != bk {
		return false
	}
	switch ak {
	case Null:
		return true
	case Bool:
		return a.B == b.B
	case String:
		return a.S == b.S
	case Array:
		if len(a.A) != len(b.A) {
			return false
		}
		for i := range a.A {
			if !SameJSON(a.A[i], b.A[i]) {
				return false
			}
		}
		return true
	case Object:
		if len(a.O.Keys) != len(b.O.Keys) {
			return false
		}
		for i, k := range a.O.Keys {
			bv, ok := b.O.Get(k)
			if !ok || !SameJSON(a.O.At(i), bv) {
				return false
			}
		}
		return true
	}
	return false
}

// Float64 returns a number's value as float64.
func (v *Value) Float64() float64 {
	if v.K == Int {
		return float64(v.I)
	}
	return v.F
}

// NumberMode says how Parse types numbers.
type NumberMode uint8

const (
	// IntsPreserved: an integer literal that fits int64 is Int, else Float
	// (k8s.io/apimachinery's JSON).
	IntsPreserved NumberMode = iota
	// AllFloat: every number is Float (encoding/json into interface{}).
	AllFloat
)

// Parse parses one JSON document.
//
// It allocates little, which matters most under TinyGo, whose allocator
// and collector are slow: the input is copied once into a string that
// every string without escapes and every number literal is a substring of;
// values and objects come from slabs; an object's keys and values and an
// array's elements are gathered on a scratch stack and then copied into
// slices of their exact size, cut from slabs too.
func Parse(data []byte, mode NumberMode) (*Value, error) {
	p := parser{d: data, mode: mode, src: string(data)}
	return p.whole(func() (*Value, error) { return p.value(0) })
}

// whole reads a document with read (which reads the value at p.i) and
// checks that only whitespace surrounds it.
func (p *parser) whole(read func() (*Value, error)) (*Value, error) {
	p.ws()
	v, err := read()
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.d) {
		return nil, p.fail("unexpected data after the top-level value")
	}
	return v, nil
}

type parser struct {
	d    []byte
	i    int
	mode NumberMode
	// src is d as a string (Parse; empty for RawFields): strings and
	// number literals are its substrings.
	src string
	// vals, objs, keySlab and ptrSlab are slabs; stack and keys the
	// scratch stacks of the objects and arrays being parsed.
	vals    []Value
	objs    []Obj
	keySlab []string
	ptrSlab []*Value
	stack   []*Value
	keys    []string
	// reader, when set, reads parseKey's value lazily (fieldsParsed).
	reader *Reader
}

const slabSize = 64

func (p *parser) newValue() *Value {
	if len(p.vals) == cap(p.vals) {
		p.vals = make([]Value, 0, slabSize)
	}
	p.vals = p.vals[:len(p.vals)+1]
	return &p.vals[len(p.vals)-1]
}

func (p *parser) newObj() *Obj {
	if len(p.objs) == cap(p.objs) {
		p.objs = make([]Obj, 0, slabSize/4)
	}
	p.objs = p.objs[:len(p.objs)+1]
	return &p.objs[len(p.objs)-1]
}

// ptrs and strs cut n elements from their slabs, with the capacity cut to n
// too: an append to an object's keys or an array's elements copies them
// rather than write over the next object's. Never nil, even for n = 0 (an
// empty array is not a nil one).
func (p *parser) ptrs(n int) []*Value {
	l := len(p.ptrSlab)
	if cap(p.ptrSlab)-l < n || p.ptrSlab == nil {
		p.ptrSlab, l = make([]*Value, 0, max(4*slabSize, n)), 0
	}
	p.ptrSlab = p.ptrSlab[:l+n]
	return p.ptrSlab[l : l+n : l+n]
}

func (p *parser) strs(n int) []string {
	l := len(p.keySlab)
	if cap(p.keySlab)-l < n || p.keySlab == nil {
		p.keySlab, l = make([]string, 0, max(4*slabSize, n)), 0
	}
	p.keySlab = p.keySlab[:l+n]
	return p.keySlab[l : l+n : l+n]
}

// substr is d[start:end] as a string, without a copy when Parse made src.
func (p *parser) substr(start, end int) string {
	if len(p.src) == len(p.d) {
		return p.src[start:end]
	}
	return string(p.d[start:end])
}

// endObject makes the object of the keys and values stacked from base:
// slices of their exact size, the last of repeated keys winning at the
// place of the first (as Obj.Set does).
func (p *parser) endObject(base int) *Value {
	o := p.endObj(base)
	v := p.newValue()
	v.K, v.O = Object, o
	return v
}

// endObj is endObject's Obj.
func (p *parser) endObj(base int) *Obj {
	keys, vals := p.keys[base:], p.stack[base:]
	o := p.newObj()
	o.Keys = p.strs(len(keys))[:0]
	o.Vals = p.ptrs(len(keys))[:0]
	for i, k := range keys {
		dup := false
		for j, prev := range o.Keys {
			if prev == k {
				o.Vals[j] = vals[i]
				dup = true
				break
			}
		}
		if !dup {
			o.Keys = append(o.Keys, k)
			o.Vals = append(o.Vals, vals[i])
		}
	}
	for i := base; i < len(p.stack); i++ {
		p.stack[i] = nil
	}
	p.keys, p.stack = p.keys[:base], p.stack[:base]
	return o
}

// endArray makes the array of the elements stacked from base.
func (p *parser) endArray(base int) *Value {
	v := p.newValue()
	v.K, v.A = Array, p.endArr(base)
	return v
}

// endArr is endArray's elements.
func (p *parser) endArr(base int) []*Value {
	a := p.ptrs(len(p.stack) - base)
	copy(a, p.stack[base:])
	for i := base; i < len(p.stack); i++ {
		p.stack[i] = nil
	}
	p.stack = p.stack[:base]
	return a
}

const maxDepth = 10000

func (p *parser) fail(msg string) error {
	return &SyntaxError{Offset: p.i, Msg: msg}
}

// SyntaxError locates a JSON syntax error.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Unwrap makes errors.Is(err, ErrSyntax) hold.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// The hot loops work on locals, written back once: TinyGo's Wasm keeps a
// local in a register, a field of *p in linear memory.

func (p *parser) ws() {
	d, i := p.d, p.i
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			p.i = i
			return
		}
	}
	p.i = i
}

func (p *parser) value(depth int) (*Value, error) {
	if depth > maxDepth {
		return nil, p.fail("nesting too deep")
	}
	if p.i >= len(p.d) {
		return nil, p.fail("unexpected end of input")
	}
	switch c := p.d[p.i]; {
	case c == '{':
		p.i++
		p.ws()
		base := len(p.stack)
		if p.i < len(p.d) && p.d[p.i] == '}' {
			p.i++
			return p.endObject(base), nil
		}
		for {
			p.ws()
			if p.i >= len(p.d) || p.d[p.i] != '"' {
				return nil, p.fail("expected a string key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.d) || p.d[p.i] != ':' {
				return nil, p.fail("expected ':'")
			}
			p.i++
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			p.keys = append(p.keys, k)
			p.stack = append(p.stack, v)
			p.ws()
			if p.i >= len(p.d) {
				return nil, p.fail("unexpected end of input in object")
			}
			if p.d[p.i] == ',' {
				p.i++
				continue
			}
			if p.d[p.i] == '}' {
				p.i++
				return p.endObject(base), nil
			}
			return nil, p.fail("expected ',' or '}'")
		}
	case c == '[':
		p.i++
		p.ws()
		base := len(p.stack)
		if p.i < len(p.d) && p.d[p.i] == ']' {
			p.i++
			return p.endArray(base), nil
		}
		for {
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			// The keys stack stays aligned with the values stack.
			p.keys = append(p.keys, "")
			p.stack = append(p.stack, v)
			p.ws()
			if p.i >= len(p.d) {
				return nil, p.fail("unexpected end of input in array")
			}
			if p.d[p.i] == ',' {
				p.i++
				continue
			}
			if p.d[p.i] == ']' {
				p.i++
				p.keys = p.keys[:base]
				return p.endArray(base), nil
			}
			return nil, p.fail("expected ',' or ']'")
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		v := p.newValue()
		v.K, v.S = String, s
		return v, nil
	case c == 't':
		v := p.newValue()
		v.K, v.B = Bool, true
		return p.lit("true", v)
	case c == 'f':
		v := p.newValue()
		v.K = Bool
		return p.lit("false", v)
	case c == 'n':
		return p.lit("null", p.newValue())
	case c == '-' || (c >= '0' && c <= '9'):
		return p.num()
	}
	return nil, p.fail("unexpected character " + strconv.QuoteRune(rune(p.d[p.i])))
}

func (p *parser) lit(s string, v *Value) (*Value, error) {
	if len(p.d)-p.i < len(s) || string(p.d[p.i:p.i+len(s)]) != s {
		return nil, p.fail("invalid literal")
	}
	p.i += len(s)
	return v, nil
}

func (p *parser) num() (*Value, error) {
	start := p.i
	isInt := true
	if p.d[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.d) {
		return nil, p.fail("invalid number")
	}
	if p.d[p.i] == '0' {
		p.i++
	} else if p.d[p.i] >= '1' && p.d[p.i] <= '9' {
		for p.i < len(p.d) && p.d[p.i] >= '0' && p.d[p.i] <= '9' {
			p.i++
		}
	} else {
		return nil, p.fail("invalid number")
	}
	if p.i < len(p.d) && p.d[p.i] == '.' {
		isInt = false
		p.i++
		d := p.i
		for p.i < len(p.d) && p.d[p.i] >= '0' && p.d[p.i] <= '9' {
			p.i++
		}
		if p.i == d {
			return nil, p.fail("invalid number")
		}
	}
	if p.i < len(p.d) && (p.d[p.i] == 'e' || p.d[p.i] == 'E') {
		isInt = false
		p.i++
		if p.i < len(p.d) && (p.d[p.i] == '+' || p.d[p.i] == '-') {
			p.i++
		}
		d := p.i
		for p.i < len(p.d) && p.d[p.i] >= '0' && p.d[p.i] <= '9' {
			p.i++
		}
		if p.i == d {
			return nil, p.fail("invalid number")
		}
	}
	lit := p.substr(start, p.i)
	if isInt && p.mode == IntsPreserved {
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
			v := p.newValue()
			v.K, v.I = Int, i
			return v, nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, &SyntaxError{Offset: start, Msg: "number " + lit + " out of range"}
	}
	v := p.newValue()
	v.K, v.F = Float, f
	return v, nil
}

func (p *parser) str() (string, error) {
	d := p.d
	start := p.i + 1 // after the opening quote
	ascii := true
	for i := start; i < len(d); i++ {
		c := d[i]
		switch {
		case c == '"':
			s := p.substr(start, i)
			p.i = i + 1
			if !ascii && !utf8.ValidString(s) {
				return string(fastjson.Unquote(d[start-1 : i+1])), nil
			}
			return s, nil
		case c == '\\':
			p.i = i
			return p.strSlow(start)
		case c < 0x20:
			p.i = i
			return "", p.fail("control character in string")
		case c >= 0x80:
			ascii = false
		}
	}
	p.i = len(d)
	return "", p.fail("unterminated string")
}

// strSlow reads the rest of a string with escapes, p.i at its first
// backslash: it checks the escapes here, where an error can name its offset,
// and decodes the string with sdk/fastjson, the one JSON string decoder (as
// encoding/json does: a lone surrogate and each invalid UTF-8 byte become
// U+FFFD).
func (p *parser) strSlow(start int) (string, error) {
	for p.i < len(p.d) {
		c := p.d[p.i]
		switch {
		case c == '"':
			p.i++
			return string(fastjson.Unquote(p.d[start-1 : p.i])), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c != '\\':
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.d) {
			break
		}
		e := p.d[p.i]
		p.i++
		switch e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if _, ok := p.hex4(); !ok {
				return "", p.fail("invalid \\u escape")
			}
		default:
			return "", p.fail("invalid escape")
		}
	}
	return "", p.fail("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	if len(p.d)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.d[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// Encode appends v's JSON encoding to b (object keys in their order).
func Encode(b []byte, v *Value) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	switch v.K {
	case Null:
		return append(b, "null"...)
	case Bool:
		if v.B {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case Int:
		return strconv.AppendInt(b, v.I, 10)
	case Float:
		return AppendFloat(b, v.F)
	case String:
		// Only the escapes JSON requires: the engine's output is read
		// back by a JSON decoder (the host's), so json.Marshal's
		// HTML-safe escapes would be work for the same value.
		return fastjson.AppendQuoteMinimal(b, v.S)
	case Array:
		if v.A == nil && v.NilArray {
			return append(b, "null"...)
		}
		b = append(b, '[')
		for i, e := range v.A {
			if i > 0 {
				b = append(b, ',')
			}
			b = Encode(b, e)
		}
		return append(b, ']')
	case Object:
		b = append(b, '{')
		for i, k := range v.O.Keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = fastjson.AppendQuoteMinimal(b, k)
			b = append(b, ':')
			b = Encode(b, v.O.Vals[i])
		}
		return append(b, '}')
	case Raw:
		// Not read, so not changed: its bytes as they came.
		return append(b, v.raw()...)
	}
	return append(b, "null"...)
}

// AppendFloat formats f as encoding/json does, NaN and the infinities as
// null.
func AppendFloat(b []byte, f float64) []byte {
	if out, ok := fastjson.AppendFloat(b, f); ok {
		return out
	}
	return append(b, "null"...)
}

// TypeName names v's type as Go's %T would for the value Gatekeeper holds.
func (v *Value) TypeName() string {
	if v == nil {
		return "<nil>"
	}
	v.Load()
	switch v.K {
	case Null:
		return "<nil>"
	case Bool:
		return "bool"
	case Int:
		return "int64"
	case Float:
		return "float64"
	case String:
		return "string"
	case Array:
		return "[]interface {}"
	case Object:
		return "map[string]interface {}"
	}
	return "unknown"
}
