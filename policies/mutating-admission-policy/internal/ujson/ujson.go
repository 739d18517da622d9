// Package ujson is JSON for unstructured content without reflection: the
// values a JSON object decodes to in an any (map[string]any, []any, string,
// bool, int64 or float64, nil) and their encoding.
//
// Decoders and encoders by reflection (encoding/json, sigs.k8s.io/json) are
// slow in Wasm, under TinyGo above all. Decode and Encode give exactly what
// the reference libraries give for the values unstructured content is made
// of, and decline (ok=false) whatever they are not sure of: the caller then
// uses the library, so that a result never depends on which path answered.
// The two engines follow different references on two rules, which are
// therefore options (Options): a number out of float64's range, and Go int
// values.
//
// Decoding (sigs.k8s.io/json's copy of encoding/json, with PreserveInts, or
// encoding/json as Options.Numbers says):
//   - the whole input must be one JSON value (RFC 8259 grammar; whitespace is
//     space, tab, CR, LF), else the library refuses it; here the value must
//     also be an object (a top-level null leaves the map nil, other values
//     are type errors: declined);
//   - numbers: see Numbers;
//   - strings: the escapes \" \\ \/ \b \f \n \r \t \uXXXX; a \u surrogate
//     pair is one rune, any other \u surrogate is U+FFFD; each byte of
//     invalid UTF-8 is U+FFFD; a control character (< 0x20) is an error;
//   - objects are non-nil maps, arrays non-nil slices, duplicate keys: the
//     last wins;
//   - nesting deeper than 10000 is an error (declined here from 1000 on).
//
// Encoding (encoding/json.Marshal):
//   - map keys sorted bytewise, nil maps and slices are null;
//   - strings HTML-safe: " \ and the control characters \b \f \n \r \t
//     escaped short, other control characters, <, > and & as \u00xx (lower
//     case hex), U+2028 and U+2029 as \u2028 and \u2029, each byte of
//     invalid UTF-8 as \ufffd;
//   - int64 in decimal (and int, with Options.Int); float64 as strconv's
//     shortest 'f' format, or 'e' below 1e-6 or from 1e21 on (absolute
//     value) with a one-digit negative exponent written e-7, not e-07; NaN
//     and infinities are errors (declined);
//   - any other Go type is declined (encoding/json would use reflection on
//     it), and so is nesting deeper than 1000 (encoding/json's cycle check
//     starts there).
//
// Nothing here uses reflection; it builds under TinyGo.
package ujson

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// Options select the reference on the rules where the references differ.
// The zero value follows sigs.k8s.io/json's decoding (as the apiserver
// decodes unstructured objects) and declines Go int values.
type Options struct {
	// Numbers is how Decode gives numbers.
	Numbers Numbers
	// Int: Encode writes Go int values in decimal, as encoding/json does;
	// without it they are declined (they are not unstructured content).
	Int bool
}

// Numbers is how Decode gives numbers.
type Numbers uint8

const (
	// IntOrFloat is sigs.k8s.io/json's UnmarshalCaseSensitivePreserveInts
	// into a map[string]any: a number without '.' that strconv.ParseInt
	// accepts is an int64 (so -0 is int64 0, 1e3 and 9223372036854775808
	// are float64); any other is strconv.ParseFloat's float64, and a number
	// out of float64's range is an error (declined).
	IntOrFloat Numbers = iota
	// IntOrFloatInf is encoding/json's Decoder with UseNumber, each
	// json.Number then Int64() when that succeeds, else Float64() with its
	// error ignored: as IntOrFloat, but a number out of float64's range is
	// +Inf or -Inf.
	IntOrFloatInf
	// Float is encoding/json's Unmarshal into an any: every number is
	// strconv.ParseFloat's float64 (-0 is -0.0); a number out of range is an
	// error (declined).
	Float
)

const maxDepth = 1000

// Decode decodes a JSON object into unstructured content exactly as the
// reference o.Numbers names does into a nil map[string]any. ok=false for
// anything else, including every input the reference rejects and a
// top-level null; the map is then nil.
func Decode(b []byte, o Options) (m map[string]any, ok bool) {
	d := udecoder{b: b, s: string(b), numbers: o.Numbers, members: make([]umember, 0, 32), elems: make([]any, 0, 16)}
	d.skipSpace()
	if d.i >= len(d.s) || d.s[d.i] != '{' {
		return nil, false
	}
	v, ok := d.object(0)
	if !ok {
		return nil, false
	}
	d.skipSpace()
	if d.i != len(d.s) {
		return nil, false
	}
	return v, true
}

// udecoder reads JSON from b, the input, and s, a copy of it: strings
// without escapes are substrings of s, without a copy of their own.
type udecoder struct {
	b       []byte
	s       string
	i       int
	numbers Numbers
	// members and elems are stacks of the members of the objects and the
	// elements of the arrays being decoded, so that each map and slice is
	// made once at its final size.
	members []umember
	elems   []any
	// buf holds unescaped strings.
	buf []byte
}

type umember struct {
	k string
	v any
}

func (d *udecoder) skipSpace() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// value decodes the value at d.i (spaces skipped).
func (d *udecoder) value(depth int) (any, bool) {
	if d.i >= len(d.s) {
		return nil, false
	}
	switch c := d.s[d.i]; {
	case c == '"':
		return d.str()
	case c == '{':
		m, ok := d.object(depth)
		return m, ok
	case c == '[':
		return d.array(depth)
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, false
}

func (d *udecoder) literal(lit string) bool {
	if len(d.s)-d.i < len(lit) || d.s[d.i:d.i+len(lit)] != lit {
		return false
	}
	d.i += len(lit)
	return true
}

// open reads the '{' or '[' at d.i and the spaces after it, and reports
// whether the container is empty (its close, read too, follows).
func (d *udecoder) open(close byte) bool {
	d.i++
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == close {
		d.i++
		return true
	}
	return false
}

// next reads what follows a member or an element: more after ',', !more
// after close; ok=false for anything else.
func (d *udecoder) next(close byte) (more, ok bool) {
	d.skipSpace()
	if d.i >= len(d.s) {
		return false, false
	}
	c := d.s[d.i]
	d.i++
	if c == ',' {
		return true, true
	}
	return false, c == close
}

// object decodes the object whose '{' is at d.i.
func (d *udecoder) object(depth int) (map[string]any, bool) {
	if depth >= maxDepth {
		return nil, false
	}
	if d.open('}') {
		return map[string]any{}, true
	}
	base := len(d.members)
	for more := true; more; {
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, false
		}
		d.i++
		d.skipSpace()
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		d.members = append(d.members, umember{k, v})
		if more, ok = d.next('}'); !ok {
			return nil, false
		}
	}
	members := d.members[base:]
	m := make(map[string]any, len(members))
	for i := range members {
		m[members[i].k] = members[i].v
		members[i] = umember{}
	}
	d.members = d.members[:base]
	return m, true
}

// array decodes the array whose '[' is at d.i.
func (d *udecoder) array(depth int) ([]any, bool) {
	if depth >= maxDepth {
		return nil, false
	}
	if d.open(']') {
		return []any{}, true
	}
	base := len(d.elems)
	for more := true; more; {
		d.skipSpace()
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		d.elems = append(d.elems, v)
		if more, ok = d.next(']'); !ok {
			return nil, false
		}
	}
	a := make([]any, len(d.elems)-base)
	copy(a, d.elems[base:])
	clear(d.elems[base:])
	d.elems = d.elems[:base]
	return a, true
}

// str decodes the string whose '"' is at d.i with sdk/fastjson, the one
// JSON string decoder: ScanString checks it as sigsjson does (escapes,
// control characters) and Unquote's rules give its text (escapes resolved,
// a lone surrogate and each invalid UTF-8 byte U+FFFD). A string that
// decodes to its own bytes is a substring of d.s, without a copy.
func (d *udecoder) str() (string, bool) {
	start := d.i
	end, escaped, ok := fastjson.ScanString(d.b, start)
	if !ok {
		return "", false
	}
	d.i = end
	s := d.s[start+1 : end-1]
	if !escaped || strings.IndexByte(s, '\\') < 0 && utf8.ValidString(s) {
		return s, true
	}
	d.buf = fastjson.AppendUnquote(d.buf[:0], d.b[start:end])
	return string(d.buf), true
}

// number decodes the number at d.i.
func (d *udecoder) number() (any, bool) {
	s := d.s
	start := d.i
	i := start
	neg := false
	if s[i] == '-' {
		neg = true
		i++
	}
	if i >= len(s) {
		return nil, false
	}
	digits := i
	switch c := s[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	intEnd := i
	dot, exp := false, false
	if i < len(s) && s[i] == '.' {
		dot = true
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		exp = true
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	d.i = i
	lit := s[start:i]
	if d.numbers == Float {
		if !dot && !exp && intEnd-digits <= 15 {
			// At most 15 digits: exact in a float64, the value ParseFloat
			// gives (-0 included: negation flips the sign of 0).
			f := float64(smallInt(s[digits:intEnd]))
			if neg {
				f = -f
			}
			return f, true
		}
		f, err := strconv.ParseFloat(lit, 64)
		return f, err == nil
	}
	if !dot {
		if !exp && intEnd-digits <= 18 {
			// At most 18 digits: no overflow, the value ParseInt gives.
			n := smallInt(s[digits:intEnd])
			if neg {
				n = -n
			}
			return n, true
		}
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return n, true
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		// The syntax was checked: out of range. encoding/json's
		// json.Number.Float64 gives ParseFloat's +-Inf with the error.
		return f, d.numbers == IntOrFloatInf && math.IsInf(f, 0)
	}
	return f, true
}

// smallInt is the value of at most 18 decimal digits.
func smallInt(digits string) int64 {
	var n int64
	for _, c := range []byte(digits) {
		n = n*10 + int64(c-'0')
	}
	return n
}

// Encode is encoding/json.Marshal(m) for unstructured content
// (map[string]any, []any, string, bool, int64, float64, nil, nested; and int
// with o.Int), byte for byte. ok=false for any other Go type, NaN and
// infinities, and nesting deeper than 1000; the bytes are then nil. Only
// o.Int matters here.
func Encode(m map[string]any, o Options) (b []byte, ok bool) {
	e := uencoder{b: make([]byte, 0, encodeSizeHint.Load()+64), members: make([]umember, 0, 64), ints: o.Int}
	if !e.object(m, 0) {
		return nil, false
	}
	encodeSizeHint.Store(int64(min(len(e.b), 1<<20)))
	return e.b, true
}

// encodeSizeHint is the size of the last encoding, the capacity the next
// one starts with (objects of one kind are encoded over and over).
var encodeSizeHint atomic.Int64

type uencoder struct {
	b []byte
	// members is a stack of the members of the maps being encoded, sorted.
	members []umember
	// ints: Go int values are encoded, not declined.
	ints bool
}

func (e *uencoder) value(v any, depth int) bool {
	switch x := v.(type) {
	case nil:
		e.b = append(e.b, "null"...)
	case string:
		e.b = fastjson.AppendQuote(e.b, x)
	case bool:
		if x {
			e.b = append(e.b, "true"...)
		} else {
			e.b = append(e.b, "false"...)
		}
	case int64:
		e.b = strconv.AppendInt(e.b, x, 10)
	case float64:
		return e.float(x)
	case int:
		if !e.ints {
			return false
		}
		e.b = strconv.AppendInt(e.b, int64(x), 10)
	case map[string]any:
		return e.object(x, depth)
	case []any:
		return e.array(x, depth)
	default:
		return false
	}
	return true
}

func (e *uencoder) object(m map[string]any, depth int) bool {
	if m == nil {
		e.b = append(e.b, "null"...)
		return true
	}
	if depth >= maxDepth {
		return false
	}
	base := len(e.members)
	for k, v := range m {
		e.members = append(e.members, umember{k, v})
	}
	end := len(e.members)
	sortMembers(e.members[base:end])
	e.b = append(e.b, '{')
	for i := base; i < end; i++ {
		if i > base {
			e.b = append(e.b, ',')
		}
		e.b = fastjson.AppendQuote(e.b, e.members[i].k)
		e.b = append(e.b, ':')
		if !e.value(e.members[i].v, depth+1) {
			return false
		}
	}
	e.b = append(e.b, '}')
	clear(e.members[base:end])
	e.members = e.members[:base]
	return true
}

// sortMembers sorts members by key, bytewise (keys are distinct).
func sortMembers(ms []umember) {
	if len(ms) > 12 {
		slices.SortFunc(ms, func(a, b umember) int { return strings.Compare(a.k, b.k) })
		return
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].k < ms[j-1].k; j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

func (e *uencoder) array(a []any, depth int) bool {
	if a == nil {
		e.b = append(e.b, "null"...)
		return true
	}
	if depth >= maxDepth {
		return false
	}
	e.b = append(e.b, '[')
	for i, v := range a {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if !e.value(v, depth+1) {
			return false
		}
	}
	e.b = append(e.b, ']')
	return true
}

func (e *uencoder) float(f float64) bool {
	b, ok := fastjson.AppendFloat(e.b, f)
	e.b = b
	return ok
}
