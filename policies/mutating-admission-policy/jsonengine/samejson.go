package jsonengine

import (
	"math"
	"unicode/utf8"
	"unsafe"
)

// sameJSON tells, without encoding a, whether encodeJSON(a) and
// encodeJSON(b) are the same bytes, given that encodeJSON(b) succeeded:
// Evaluate compares the request's object with the mutated one that way
// instead of encoding both. ok is false when it cannot tell (then the caller
// encodes a): a value of a type other than unstructured content's, a
// non-finite float, two numbers of different Go types, strings or keys that
// are not valid UTF-8 where they differ, nil maps and lists, more than
// maxSameDepth levels. When ok, encodeJSON(a) would also have succeeded:
// every part of a that is not shared with b (the same map or list, which an
// apply configuration's result shares with its object: graft) is checked.
// TestSameJSON and FuzzSameJSON compare it with the encodings.
func sameJSON(a, b map[string]any) (same, ok bool) {
	switch sameValue(a, b, 0) {
	case jsonSame:
		return true, true
	case jsonDiffer:
		return false, true
	}
	return false, false
}

// maxSameDepth bounds sameValue's recursion (deeper: unsure).
const maxSameDepth = 1000

type jsonComparison uint8

const (
	jsonSame jsonComparison = iota
	jsonDiffer
	jsonUnsure
)

// mapID is the identity of a map (a map value is a pointer to it, for Go
// and for TinyGo alike).
func mapID(m map[string]any) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&m)) }

func sameValue(a, b any, depth int) jsonComparison {
	if depth > maxSameDepth {
		return jsonUnsure
	}
	switch x := a.(type) {
	case nil:
		switch b.(type) {
		case nil:
			return jsonSame
		case map[string]any, []any:
			return jsonUnsure // a nil map or list is null too
		}
		return differ(nil, b)
	case string:
		if y, isString := b.(string); isString {
			if x == y {
				return jsonSame
			}
			if !utf8.ValidString(x) || !utf8.ValidString(y) {
				return jsonUnsure
			}
			return jsonDiffer
		}
		return differ(a, b)
	case bool:
		if y, isBool := b.(bool); isBool {
			if x == y {
				return jsonSame
			}
			return jsonDiffer
		}
		return differ(a, b)
	case int64:
		if y, isInt := b.(int64); isInt {
			if x == y {
				return jsonSame
			}
			return jsonDiffer
		}
		return differ(a, b)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return jsonUnsure
		}
		if y, isFloat := b.(float64); isFloat {
			if math.Float64bits(x) == math.Float64bits(y) {
				return jsonSame
			}
			return jsonDiffer
		}
		return differ(a, b)
	case map[string]any:
		if x == nil {
			return jsonUnsure
		}
		y, isMap := b.(map[string]any)
		if !isMap {
			return differ(a, b)
		}
		if y == nil {
			return jsonUnsure
		}
		if mapID(x) == mapID(y) {
			return jsonSame // shared: encodeJSON(b) encoded it
		}
		result := jsonSame
		if len(x) != len(y) {
			result = jsonDiffer
		}
		for k, xv := range x {
			yv, found := y[k]
			var c jsonComparison
			switch {
			case found:
				c = sameValue(xv, yv, depth+1)
			case !utf8.ValidString(k) || !validKeys(y):
				return jsonUnsure // another key of y may be written as k
			default:
				c = differ(xv, nil)
			}
			if c == jsonUnsure {
				return jsonUnsure
			}
			if c == jsonDiffer {
				result = jsonDiffer
			}
		}
		return result
	case []any:
		if x == nil {
			return jsonUnsure
		}
		y, isList := b.([]any)
		if !isList {
			return differ(a, b)
		}
		if y == nil {
			return jsonUnsure
		}
		if len(x) > 0 && len(x) == len(y) && &x[0] == &y[0] {
			return jsonSame
		}
		result := jsonSame
		if len(x) != len(y) {
			result = jsonDiffer
		}
		for i, xv := range x {
			var c jsonComparison
			if i < len(y) {
				c = sameValue(xv, y[i], depth+1)
			} else {
				c = differ(xv, nil)
			}
			if c == jsonUnsure {
				return jsonUnsure
			}
			if c == jsonDiffer {
				result = jsonDiffer
			}
		}
		return result
	}
	return jsonUnsure
}

// differ is the comparison of a with b of another kind of value: they
// differ if a encodes (checked: encodable), as null, a string, a boolean, a
// number, an object or an array never encode alike; two numbers of
// different Go types (int64 and float64) may, so that is unsure, and so is
// a b of any other type.
func differ(a, b any) jsonComparison {
	switch b.(type) {
	case nil, string, bool, map[string]any, []any:
	case int64, float64:
		switch a.(type) {
		case int64, float64:
			return jsonUnsure
		}
	default:
		return jsonUnsure
	}
	if !encodable(a, 0) {
		return jsonUnsure
	}
	return jsonDiffer
}

// encodable: encodeJSON(v) succeeds, for v made of unstructured content's
// types only (false for anything else, which only means "unsure").
func encodable(v any, depth int) bool {
	if depth > maxSameDepth {
		return false
	}
	switch x := v.(type) {
	case nil, string, bool, int64:
		return true
	case float64:
		return !math.IsInf(x, 0) && !math.IsNaN(x)
	case map[string]any:
		for _, e := range x {
			if !encodable(e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !encodable(e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

func validKeys(m map[string]any) bool {
	for k := range m {
		if !utf8.ValidString(k) {
			return false
		}
	}
	return true
}
