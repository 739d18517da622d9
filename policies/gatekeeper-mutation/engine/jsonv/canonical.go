package jsonv

import (
	"strconv"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// AppendTyped appends an encoding of v that is equal for two values exactly
// when Equal holds: object keys sorted, Int and Float apart (i / f
// prefixes), a nil array apart from an empty one. It replaces a deep copy
// plus Equal in the mutation loop: one buffer instead of a tree.
func AppendTyped(b []byte, v *Value) []byte {
	c := canonical{typed: true}
	return c.append(b, v)
}

// AppendSemantic appends an encoding of v that is equal for two values
// exactly when SameJSON holds (numbers as float64, keys sorted).
func AppendSemantic(b []byte, v *Value) []byte {
	var c canonical
	return c.append(b, v)
}

// canonical is one canonical encoding: typed or semantic, and the stack of
// the sorted key orders of the objects being encoded (one slice for the
// whole encoding: under TinyGo a per-object array would be allocated on
// the heap, object after object).
type canonical struct {
	typed bool
	order []int
}

func (c *canonical) append(b []byte, v *Value) []byte {
	typed := c.typed
	if v == nil {
		return append(b, 'n')
	}
	v.Load()
	switch v.K {
	case Null:
		return append(b, 'n')
	case Bool:
		if v.B {
			return append(b, 't')
		}
		return append(b, 'F')
	case Int:
		if typed {
			return strconv.AppendInt(append(b, 'i'), v.I, 10)
		}
		return appendFloatCanon(append(b, 'f'), float64(v.I))
	case Float:
		return appendFloatCanon(append(b, 'f'), v.F)
	case String:
		return fastjson.AppendQuoteMinimal(b, v.S)
	case Array:
		if v.NilArray && v.A == nil {
			if typed {
				return append(b, 'N')
			}
			return append(b, 'n')
		}
		b = append(b, '[')
		for _, e := range v.A {
			b = c.append(b, e)
			b = append(b, ',')
		}
		return append(b, ']')
	case Object:
		keys := v.O.Keys
		base := len(c.order)
		for i := range keys {
			c.order = append(c.order, i)
			order := c.order[base:]
			for j := len(order) - 1; j > 0 && keys[order[j]] < keys[order[j-1]]; j-- {
				order[j], order[j-1] = order[j-1], order[j]
			}
		}
		b = append(b, '{')
		// The members' encodings push their own orders after this one's
		// and drop them again; c.order may move, so index it afresh.
		for k := range keys {
			i := c.order[base+k]
			b = fastjson.AppendQuoteMinimal(b, keys[i])
			b = append(b, ':')
			b = c.append(b, v.O.Vals[i])
			b = append(b, ',')
		}
		c.order = c.order[:base]
		return append(b, '}')
	}
	return b
}

func appendFloatCanon(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0')
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// SameTyped reports whether two AppendTyped encodings encode values that
// SameJSON holds for: what comparing their AppendSemantic encodings would
// say (an Int and a Float are compared as float64, a nil array is null),
// without encoding the values again.
func SameTyped(a, b []byte) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		switch {
		case ca == '"':
			if cb != '"' {
				return false
			}
			ea, eb := stringEnd(a, i), stringEnd(b, j)
			if string(a[i:ea]) != string(b[j:eb]) {
				return false
			}
			i, j = ea, eb
		case ca == 'i' || ca == 'f':
			if cb != 'i' && cb != 'f' {
				return false
			}
			ea, eb := numberEnd(a, i+1), numberEnd(b, j+1)
			fa, oka := typedNumber(ca, a[i+1:ea])
			fb, okb := typedNumber(cb, b[j+1:eb])
			if !oka || !okb || fa != fb {
				return false
			}
			i, j = ea, eb
		case ca == 'n' || ca == 'N':
			if cb != 'n' && cb != 'N' {
				return false
			}
			i, j = i+1, j+1
		default:
			if ca != cb {
				return false
			}
			i, j = i+1, j+1
		}
	}
	return i == len(a) && j == len(b)
}

// stringEnd is the index after the string token starting at a[i] ('"').
func stringEnd(a []byte, i int) int {
	for i++; i < len(a); i++ {
		switch a[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(a)
}

// numberEnd is the index after the number digits starting at a[i].
func numberEnd(a []byte, i int) int {
	for i < len(a) && a[i] != ',' && a[i] != ']' && a[i] != '}' {
		i++
	}
	return i
}

// typedNumber decodes the digits of an 'i' or 'f' token as float64, as
// AppendSemantic holds the number.
func typedNumber(kind byte, digits []byte) (float64, bool) {
	if kind == 'i' {
		n, err := strconv.ParseInt(string(digits), 10, 64)
		return float64(n), err == nil
	}
	f, err := strconv.ParseFloat(string(digits), 64)
	return f, err == nil
}
