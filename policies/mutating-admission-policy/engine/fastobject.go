package engine

import (
	"reflect"
	"unsafe"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
)

// objectValue is, for the fast path, what the apiserver's patchers do with
// an Object value (k8s.io/apiserver/pkg/cel/mutation/dynamic):
// CheckTypeNamesMatchFieldPathNames, then Value() for the unstructured map.
//
// The apiserver's type check calls Value() on every Object it visits, and
// Value() converts the whole subtree below it: the work grows with the
// square of the depth, and an apply configuration is mostly depth (a label
// is four Objects deep). Here the tree is walked once for the check and
// once for the conversion. ok=false (the caller falls back) when the type
// names do not match (the apiserver's error), when the fields cannot be
// read (see objectFields), or when a value is not one of the JSON-like
// values whose conversion is reproduced here exactly.
func objectValue(ov *dynamic.ObjectVal) (map[string]any, bool) {
	if !typeNamesMatch(ov, ov.Type().TypeName()) {
		return nil, false
	}
	return objectToMap(ov)
}

// objectFieldsOffset locates ObjectVal's unexported field map. The apiserver
// gives no accessor; reading it is guarded by its type, and
// TestObjectValue compares the results with the apiserver's methods.
var objectFieldsOffset = func() uintptr {
	f, ok := reflect.TypeOf(dynamic.ObjectVal{}).FieldByName("fields")
	if !ok || f.Type != reflect.TypeOf(map[string]ref.Val(nil)) {
		return ^uintptr(0)
	}
	return f.Offset
}()

// objectFields returns the fields of an Object value.
func objectFields(ov *dynamic.ObjectVal) (map[string]ref.Val, bool) {
	if objectFieldsOffset == ^uintptr(0) {
		return nil, false
	}
	return *(*map[string]ref.Val)(unsafe.Add(unsafe.Pointer(ov), objectFieldsOffset)), true
}

// typeNamesMatch is the apiserver's typeCheck finding no error: every
// Object's type name is the path of field names from the root, and list or
// map values built by CEL are checked element by element with their
// parent's path.
func typeNamesMatch(v ref.Val, path string) bool {
	if ov, ok := v.(*dynamic.ObjectVal); ok {
		if ov.Type().TypeName() != path {
			return false
		}
		fields, ok := objectFields(ov)
		if !ok {
			return false
		}
		for k, f := range fields {
			if !typeNamesMatch(f, path+"."+k) {
				return false
			}
		}
		// The apiserver also looks at ov.Value(), which is a map[string]any
		// or an error, never a list or map of values: nothing more to check.
		return true
	}
	if isCELScalar(v) {
		return true // its Value() is no list or map (and would be boxed)
	}
	switch value := v.Value().(type) {
	case []ref.Val:
		for _, e := range value {
			if !typeNamesMatch(e, path) {
				return false
			}
		}
	case map[ref.Val]ref.Val:
		for _, e := range value {
			if !typeNamesMatch(e, path) {
				return false
			}
		}
	}
	return true
}

// objectToMap is ObjectVal.ConvertToNative(map[string]any) for values made
// of Objects, strings, integers, doubles, booleans, and lists and string-keyed
// maps of those.
func objectToMap(ov *dynamic.ObjectVal) (map[string]any, bool) {
	fields, ok := objectFields(ov)
	if !ok {
		return nil, false
	}
	out := make(map[string]any, len(fields))
	for k, f := range fields {
		v, ok := convertFieldValue(f)
		if !ok {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}

// convertFieldValue is the apiserver's convertField: a list's elements and a
// map's values are converted with their own Value() (one level, not
// recursively), anything else is its Value().
func convertFieldValue(v ref.Val) (any, bool) {
	if isCELScalar(v) {
		return elementValue(v)
	}
	switch value := v.Value().(type) {
	case []ref.Val:
		var out []any // nil for an empty list, as the apiserver's
		for _, e := range value {
			ev, ok := elementValue(e)
			if !ok {
				return nil, false
			}
			out = append(out, ev)
		}
		return out, true
	case map[ref.Val]ref.Val:
		out := make(map[string]any, len(value))
		for k, e := range value {
			key, ok := k.Value().(string)
			if !ok {
				return nil, false
			}
			ev, ok := elementValue(e)
			if !ok {
				return nil, false
			}
			out[key] = ev
		}
		return out, true
	}
	return elementValue(v)
}

// elementValue is v.Value() for the values whose Value() is a plain JSON
// value (or, for an Object, its map).
func elementValue(v ref.Val) (any, bool) {
	switch t := v.(type) {
	case types.String:
		return string(t), true
	case types.Int:
		return int64(t), true
	case types.Double:
		return float64(t), true
	case types.Bool:
		return bool(t), true
	case *dynamic.ObjectVal:
		return objectToMap(t)
	}
	return nil, false
}

// isCELScalar is true for the values whose Value() is a string, int64,
// float64 or bool: neither a list nor a map of values.
func isCELScalar(v ref.Val) bool {
	switch v.(type) {
	case types.String, types.Int, types.Double, types.Bool:
		return true
	}
	return false
}
