package jsonengine

import (
	"encoding/json"
	"sort"
	"strconv"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// JSON for unstructured content without reflection. The engine decodes every
// request's objects and encodes every mutated object (and a JSON patch's
// document); encoding/json does both by reflection, which TinyGo runs slowly
// (it dominated an evaluation of the 5 KB Pod). decodeFast and encodeFast give
// exactly what decodeObject's encoding/json path and json.Marshal give for the
// values unstructured content is made of, and decline (ok=false) whatever else,
// for which the caller uses encoding/json: the result never depends on which
// path answered (TestJSONAgainstEncodingJSON).
//
// Decoding (json.Decoder with UseNumber, then int64 when strconv.ParseInt
// accepts the number, else strconv.ParseFloat's value, even out of range):
// the input must be valid JSON as json.Valid says and one object (else
// declined: the decoder would read the first value and ignore the rest);
// strings are decoded as encoding/json decodes them (fastjson.Unquote);
// duplicate keys: the last wins; nesting past maxFastDepth is declined.
//
// Encoding (json.Marshal): map keys sorted bytewise, nil maps and slices as
// null, strings escaped as json.Marshal escapes them (fastjson.AppendQuote),
// int64 and int in decimal, float64 as fastjson.AppendFloat writes it (NaN
// and infinities declined: json.Marshal refuses them with its own error); any
// other Go type and nesting past maxFastDepth are declined.

const maxFastDepth = 1000

// decodeFast decodes a JSON object; ok=false when it declines (see above).
func decodeFast(b []byte) (map[string]any, bool) {
	i := fastjson.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	v, ok := decodeFastValue(b, false)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

// decodeFastValue decodes one JSON value. With floats, every number is a
// float64 (as encoding/json decodes into an any; a number out of range is
// declined, where encoding/json fails), else as decodeFast.
func decodeFastValue(b []byte, floats bool) (any, bool) {
	if !fastjson.Valid(b) {
		return nil, false
	}
	d := fastDecoder{b: b, floats: floats}
	return d.value(0)
}

type fastDecoder struct {
	b      []byte
	i      int
	floats bool
}

// value decodes the value at d.i (the input is valid JSON).
func (d *fastDecoder) value(depth int) (any, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	d.i = fastjson.SkipSpace(d.b, d.i)
	switch c := d.b[d.i]; {
	case c == '{':
		m := map[string]any{}
		d.i++
		for {
			d.i = fastjson.SkipSpace(d.b, d.i)
			if d.b[d.i] == '}' {
				d.i++
				return m, true
			}
			if d.b[d.i] == ',' {
				d.i = fastjson.SkipSpace(d.b, d.i+1)
			}
			end := fastjson.StringEnd(d.b, d.i)
			key := string(fastjson.Unquote(d.b[d.i:end]))
			d.i = fastjson.SkipSpace(d.b, end)
			d.i++ // ':'
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[key] = v
		}
	case c == '[':
		l := []any{}
		d.i++
		for {
			d.i = fastjson.SkipSpace(d.b, d.i)
			if d.b[d.i] == ']' {
				d.i++
				return l, true
			}
			if d.b[d.i] == ',' {
				d.i++
			}
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			l = append(l, v)
		}
	case c == '"':
		end := fastjson.StringEnd(d.b, d.i)
		s := string(fastjson.Unquote(d.b[d.i:end]))
		d.i = end
		return s, true
	case c == 't':
		d.i += 4
		return true, true
	case c == 'f':
		d.i += 5
		return false, true
	case c == 'n':
		d.i += 4
		return nil, true
	default:
		start := d.i
		for d.i < len(d.b) {
			switch d.b[d.i] {
			case '-', '+', '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				d.i++
				continue
			}
			break
		}
		num := string(d.b[start:d.i])
		if d.floats {
			f, err := strconv.ParseFloat(num, 64)
			return f, err == nil
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil {
			return n, true
		}
		f, _ := strconv.ParseFloat(num, 64)
		return f, true
	}
}

// encodeJSON is json.Marshal(v) for unstructured content, without
// reflection when encodeFast can.
func encodeJSON(v map[string]any) ([]byte, error) {
	if b, ok := encodeFast(v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

// encodeFast encodes v as json.Marshal does; ok=false when it declines.
func encodeFast(v map[string]any) ([]byte, bool) {
	e := fastEncoder{buf: make([]byte, 0, 4096)}
	if !e.value(v, 0) {
		return nil, false
	}
	return e.buf, true
}

type fastEncoder struct {
	buf  []byte
	keys []string
}

func (e *fastEncoder) value(v any, depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case string:
		e.buf = fastjson.AppendQuote(e.buf, x)
	case bool:
		e.buf = strconv.AppendBool(e.buf, x)
	case int64:
		e.buf = strconv.AppendInt(e.buf, x, 10)
	case int:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case float64:
		var ok bool
		if e.buf, ok = fastjson.AppendFloat(e.buf, x); !ok {
			return false
		}
	case map[string]any:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return true
		}
		start := len(e.keys)
		for k := range x {
			e.keys = append(e.keys, k)
		}
		keys := e.keys[start:]
		sort.Strings(keys)
		e.buf = append(e.buf, '{')
		for i, k := range keys {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = fastjson.AppendQuote(e.buf, k)
			e.buf = append(e.buf, ':')
			if !e.value(x[k], depth+1) {
				return false
			}
		}
		e.buf = append(e.buf, '}')
		e.keys = e.keys[:start]
	case []any:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return true
		}
		e.buf = append(e.buf, '[')
		for i, el := range x {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if !e.value(el, depth+1) {
				return false
			}
		}
		e.buf = append(e.buf, ']')
	default:
		return false
	}
	return true
}
