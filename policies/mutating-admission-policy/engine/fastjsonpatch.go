package engine

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"

	"k8s.io/apiserver/pkg/cel/mutation"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
)

// A fast path for JSONPatch mutations.
//
// The apiserver's JSON patcher (k8s.io/apiserver .../mutating/patch/json_patch.go)
// converts every operation's value to a structpb.Value, marshals it with
// protojson, encodes the whole object to JSON, applies the operations with
// gopkg.in/evanphx/json-patch.v4 (which parses the document lazily and
// marshals it again) and decodes the result. decodeJSONPatchOps and
// applyJSONPatchOps compute the same result on unstructured values, without
// any JSON, for the cases they can vouch for; anything else answers ok=false
// and the caller takes the apiserver's path. The evanphx v4 quirks they
// reproduce (and the ones they decline) are listed on applyJSONPatchOps.

// jsonPatchOp is one evaluated JSONPatch operation.
type jsonPatchOp struct {
	op, path, from string
	hasValue       bool
	value          any // unstructured: map[string]any, []any, string, int64, float64, bool, nil
}

var structpbValueType = reflect.TypeOf(&structpb.Value{})

// decodeJSONPatchOps converts the value of a JSONPatch expression (a CEL list
// of JSONPatch) into operations, as the apiserver's JSON patcher does; value
// is what decoding the apiserver's JSON encoding of the value (structpb +
// encoding/json) with sigs.k8s.io/json UnmarshalCaseSensitivePreserveInts
// gives. ok=false when unsure.
//
// The value goes through the apiserver's own conversion
// (ConvertToNative(*structpb.Value), after CheckTypeNamesMatchFieldPathNames
// for Object values), so which CEL values convert, and to what, is the
// apiserver's answer by construction; only the protojson encoding and the
// JSON decoding that follow are replaced by fromStructpb. (The common
// scalars and Objects skip the structpb values, see opValue.) Declined: any
// conversion error, a type-name mismatch, an element that is not a JSONPatch,
// NaN and infinities (protojson rejects them), -0, integral numbers beyond
// ±2^53 (float64 rounding), invalid UTF-8 (protojson rejects it).
func decodeJSONPatchOps(val ref.Val) (ops []jsonPatchOp, ok bool) {
	list, isList := val.(traits.Lister)
	if !isList {
		return nil, false
	}
	if n, isInt := list.Size().(types.Int); isInt && n > 0 {
		ops = make([]jsonPatchOp, 0, int(n))
	}
	for it := list.Iterator(); it.HasNext() == types.True; {
		p, isPatch := it.Next().(*mutation.JSONPatchVal)
		if !isPatch || p == nil {
			return nil, false
		}
		op := jsonPatchOp{op: p.Op, path: p.Path, from: p.From}
		if p.Val != nil {
			v, good := opValue(p.Val)
			if !good {
				return nil, false
			}
			op.hasValue, op.value = true, v
		}
		ops = append(ops, op)
	}
	return ops, true
}

var mapType = reflect.TypeFor[map[string]any]()

// opValue is the decoded JSON of what the apiserver makes of a JSONPatch
// value. Strings, bools, ints and doubles mirror cel-go's
// ConvertToNative(*structpb.Value) (an int beyond ±(2^53-1) becomes its
// decimal string); an Object is converted by its own ConvertToNative to
// map[string]any, the map its structpb conversion would pass to
// structpb.NewValue (fromNative mirrors NewValue); anything else goes
// through the structpb conversion itself.
func opValue(val ref.Val) (any, bool) {
	switch v := val.(type) {
	case types.String:
		return string(v), utf8.ValidString(string(v))
	case types.Bool:
		return bool(v), true
	case types.Int:
		if v < -(maxExactInt-1) || v > maxExactInt-1 {
			return strconv.FormatInt(int64(v), 10), true
		}
		return int64(v), true
	case types.Double:
		return fromJSONNumber(float64(v))
	case *dynamic.ObjectVal:
		// CheckTypeNamesMatchFieldPathNames and ConvertToNative(map), in
		// one walk each (fastobject.go).
		if !typeNamesMatch(v, v.Type().TypeName()) {
			return nil, false
		}
		native, ok := objectToMap(v)
		if !ok {
			n, err := v.ConvertToNative(mapType)
			if err != nil {
				return nil, false
			}
			return fromNative(n)
		}
		return fromNative(native)
	}
	native, err := val.ConvertToNative(structpbValueType)
	if err != nil {
		return nil, false
	}
	pv, isValue := native.(*structpb.Value)
	if !isValue {
		return nil, false
	}
	return fromStructpb(pv)
}

// fromNative is fromStructpb(structpb.NewValue(v)) without the structpb
// values: the same cases, the same errors (declined).
func fromNative(v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return nil, true
	case bool:
		return x, true
	case int:
		return fromJSONNumber(float64(x))
	case int8:
		return fromJSONNumber(float64(x))
	case int16:
		return fromJSONNumber(float64(x))
	case int32:
		return fromJSONNumber(float64(x))
	case int64:
		if -maxExactInt <= x && x <= maxExactInt {
			return v, true // what fromJSONNumber gives, already boxed
		}
		return fromJSONNumber(float64(x))
	case uint:
		return fromJSONNumber(float64(x))
	case uint8:
		return fromJSONNumber(float64(x))
	case uint16:
		return fromJSONNumber(float64(x))
	case uint32:
		return fromJSONNumber(float64(x))
	case uint64:
		return fromJSONNumber(float64(x))
	case float32:
		return fromJSONNumber(float64(x))
	case float64:
		return fromJSONNumber(x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, false
		}
		return fromJSONNumber(f)
	case string:
		return v, utf8.ValidString(x) // v, not x: no new box
	case []byte:
		return base64.StdEncoding.EncodeToString(x), true
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			if !utf8.ValidString(k) {
				return nil, false
			}
			d, ok := fromNative(e)
			if !ok {
				return nil, false
			}
			m[k] = d
		}
		return m, true
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			d, ok := fromNative(e)
			if !ok {
				return nil, false
			}
			l[i] = d
		}
		return l, true
	}
	return nil, false
}

// fromStructpb is what decoding protojson's encoding of v with
// UnmarshalCaseSensitivePreserveInts gives, or ok=false where protojson
// fails or the decoded number is not certain.
func fromStructpb(v *structpb.Value) (any, bool) {
	if v == nil {
		return nil, false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return nil, true
	case *structpb.Value_BoolValue:
		return k.BoolValue, true
	case *structpb.Value_StringValue:
		return k.StringValue, utf8.ValidString(k.StringValue)
	case *structpb.Value_NumberValue:
		return fromJSONNumber(k.NumberValue)
	case *structpb.Value_StructValue:
		if k.StructValue == nil {
			return nil, false
		}
		m := make(map[string]any, len(k.StructValue.Fields))
		for key, fv := range k.StructValue.Fields {
			if !utf8.ValidString(key) {
				return nil, false
			}
			x, ok := fromStructpb(fv)
			if !ok {
				return nil, false
			}
			m[key] = x
		}
		return m, true
	case *structpb.Value_ListValue:
		if k.ListValue == nil {
			return nil, false
		}
		l := make([]any, len(k.ListValue.Values))
		for i, ev := range k.ListValue.Values {
			x, ok := fromStructpb(ev)
			if !ok {
				return nil, false
			}
			l[i] = x
		}
		return l, true
	default:
		return nil, false
	}
}

// maxExactInt is 2^53: every integer up to it is a float64.
const maxExactInt = 1 << 53

// fromJSONNumber decodes protojson's formatting of f: strconv 'f' (or 'e'
// below 1e-6 and from 1e21), shortest representation. An integral f within
// ±2^53 prints as its digits and decodes to that int64; a non-integral f
// prints with '.' or an exponent and decodes to f itself (the shortest
// representation round-trips). -0 ("-0" decodes to int64 0, which would
// then compare unlike "-0" in a test op), larger integers, NaN and
// infinities are declined.
func fromJSONNumber(f float64) (any, bool) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return nil, false
	case f == 0 && math.Signbit(f):
		return nil, false
	case f == math.Trunc(f):
		if f > maxExactInt || f < -maxExactInt {
			return nil, false
		}
		return int64(f), true
	default:
		return f, true
	}
}

// applyJSONPatchOps applies ops to doc (an object's unstructured content)
// with the semantics of evanphx/json-patch v4 Patch.Apply on doc's JSON
// encoding. testFailed reports a failed `test` op (the caller then keeps the
// object unchanged; out is doc). ok=false when unsure.
//
// doc is never modified. out shares with doc every subtree the ops did not
// change, and shares the ops' values: neither may be modified afterwards
// while the other is in use. Only the containers along the changed paths are
// new.
//
// Precondition: doc is in JSON-decoded form, i.e. what
// UnmarshalCaseSensitivePreserveInts gives of its own encoding (maps,
// slices, strings, int64, float64 that are not integral below 2^63, bools,
// nil; valid UTF-8). Unchanged subtrees are shared, not checked. On the
// containers the ops traverse and the values test compares, anything else
// is declined.
//
// Vouched for (evanphx v4, as reproduced):
//   - add: to an object sets the key (existing or not; "-" is a plain key);
//     to an array inserts at an index 0..len, or appends for "-"; a missing
//     parent is an error (declined). An add without value adds null.
//   - replace: on an object sets the key, also when it is missing (v4
//     checks nothing); on an array replaces an index < len.
//   - remove: of an existing key or index < len (else an error: declined).
//   - test: a missing key, or a null, passes only for an op without value
//     and fails for an op with one; a value that is present fails for an op
//     without value; else v4's lazyNode.equal: objects by keys, arrays in
//     order, scalars by their JSON bytes (so 1 and 1.0 differ in general; a
//     CEL 1.0 is protojson's "1" and matches 1). Equal strings that any
//     encoder could escape differently, and arrays compared with a null
//     element (v4 dereferences nil and panics), are declined.
//   - move: get, remove, then add at path (on the document as changed by
//     the removal); copy: add of the value at from (shared; it is never
//     modified in place afterwards).
//
// Declined: unknown ops; paths not starting with "/", with an empty token,
// a byte outside printable ASCII, a '~' not followed by 0 or 1, a first
// token "apiVersion" or "kind"; array indexes that are not canonical
// (leading zeros, signs: v4 accepts negative ones) or out of range; "-"
// anywhere but as the last token of add; traversal through null, scalars or
// a missing key; an explicit null value in add, replace or test (v4 keeps
// it as a raw "null" node that later behaves unlike a parsed null); copy
// from a missing key (v4 copies null); move or copy without from.
func applyJSONPatchOps(doc map[string]any, ops []jsonPatchOp) (out map[string]any, testFailed bool, ok bool) {
	if doc == nil {
		return nil, false, false
	}
	s := patchState{root: doc}
	var pathBuf, fromBuf [8]string
	for i := range ops {
		op := &ops[i]
		path, good := parsePointer(op.path, pathBuf[:0])
		if !good {
			return nil, false, false
		}
		switch op.op {
		case "add", "replace":
			if op.hasValue && op.value == nil {
				return nil, false, false
			}
			kind := editAdd
			if op.op == "replace" {
				kind = editReplace
			}
			if !s.edit(path, kind, op.value) {
				return nil, false, false
			}
		case "remove":
			if !s.edit(path, editRemove, nil) {
				return nil, false, false
			}
		case "test":
			if op.hasValue && op.value == nil {
				return nil, false, false
			}
			v, present, good := s.get(path)
			if !good {
				return nil, false, false
			}
			switch {
			case !present || v == nil:
				if op.hasValue {
					return doc, true, true
				}
			case !op.hasValue:
				return doc, true, true
			default:
				switch jsonEqual(v, op.value) {
				case eqFalse:
					return doc, true, true
				case eqUnsure:
					return nil, false, false
				}
			}
		case "move", "copy":
			if op.from == "" {
				return nil, false, false
			}
			from, good := parsePointer(op.from, fromBuf[:0])
			if !good {
				return nil, false, false
			}
			v, present, good := s.get(from)
			if !good || !present {
				return nil, false, false
			}
			if op.op == "move" {
				if !s.edit(from, editRemove, nil) {
					return nil, false, false
				}
			} else {
				// v4 adds a deep copy; v will be in two places (or be
				// edited by this very add, for a path under from): from
				// now on nothing allocated so far is modified in place.
				s.owned = s.owned[:0]
			}
			if !s.edit(path, editAdd, v) {
				return nil, false, false
			}
		default:
			return nil, false, false
		}
	}
	return s.root, false, true
}

// patchState is the document being patched, copy-on-write.
type patchState struct {
	root map[string]any
	// owned are the maps this application allocated: only they may be
	// modified in place.
	owned []unsafe.Pointer
}

type editKind uint8

const (
	editAdd editKind = iota
	editReplace
	editRemove
)

// parsePointer splits a JSON pointer into decoded tokens (appended to buf),
// or ok=false for anything applyJSONPatchOps declines.
func parsePointer(p string, buf []string) ([]string, bool) {
	if len(p) < 2 || p[0] != '/' {
		return nil, false
	}
	start := 1
	escaped := false
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			switch {
			case c < 0x20 || c > 0x7e:
				return nil, false
			case c == '~':
				if i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != '1') {
					return nil, false
				}
				escaped = true
				i++
				continue
			case c != '/':
				continue
			}
		}
		tok := p[start:i]
		if tok == "" {
			return nil, false
		}
		if escaped {
			tok = unescapeToken(tok)
			escaped = false
		}
		buf = append(buf, tok)
		start = i + 1
	}
	if buf[0] == "apiVersion" || buf[0] == "kind" {
		return nil, false
	}
	return buf, true
}

// unescapeToken decodes ~1 and ~0 (the only escapes parsePointer lets
// through), left to right as RFC 6901 and v4's replacer do.
func unescapeToken(t string) string {
	b := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		if t[i] == '~' {
			i++
			if t[i] == '1' {
				b = append(b, '/')
			} else {
				b = append(b, '~')
			}
			continue
		}
		b = append(b, t[i])
	}
	return string(b)
}

// arrayIndex parses a canonical array index (no sign, no leading zero) that
// is at most max, else ok=false.
func arrayIndex(tok string, max int) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= max
}

// get returns the value at path: present is false for a missing object
// key; ok is false when the parent is missing or not a container, or an
// array index is not an existing one.
func (s *patchState) get(path []string) (v any, present, ok bool) {
	var node any = s.root
	for _, tok := range path[:len(path)-1] {
		node, ok = child(node, tok)
		if !ok || !isContainer(node) {
			return nil, false, false
		}
	}
	key := path[len(path)-1]
	if m, isMap := node.(map[string]any); isMap {
		v, present = m[key]
		return v, present, true
	}
	v, ok = child(node, key)
	return v, ok, ok
}

// child is the existing value under tok of a container.
func child(node any, tok string) (any, bool) {
	switch c := node.(type) {
	case map[string]any:
		v, ok := c[tok]
		return v, ok
	case []any:
		i, ok := arrayIndex(tok, len(c)-1)
		if !ok {
			return nil, false
		}
		return c[i], true
	}
	return nil, false
}

// isContainer: v4 traverses objects and arrays only (null, a scalar: the
// path is missing). Nil maps and slices would encode as null.
func isContainer(v any) bool {
	switch c := v.(type) {
	case map[string]any:
		return c != nil
	case []any:
		return c != nil
	}
	return false
}

// edit applies an add, replace or remove at path, copying the containers
// on the way.
func (s *patchState) edit(path []string, kind editKind, v any) bool {
	n, ok := s.editIn(s.root, path, kind, v)
	if !ok {
		return false
	}
	s.root = n.(map[string]any)
	return true
}

func (s *patchState) editIn(node any, path []string, kind editKind, v any) (any, bool) {
	if len(path) == 1 {
		return s.editLeaf(node, path[0], kind, v)
	}
	next, ok := child(node, path[0])
	if !ok || !isContainer(next) {
		return nil, false
	}
	nc, ok := s.editIn(next, path[1:], kind, v)
	if !ok {
		return nil, false
	}
	switch c := node.(type) {
	case map[string]any:
		m := s.own(c)
		m[path[0]] = nc
		return m, true
	case []any:
		i, _ := arrayIndex(path[0], len(c)-1)
		a := make([]any, len(c))
		copy(a, c)
		a[i] = nc
		return a, true
	}
	return nil, false
}

func (s *patchState) editLeaf(node any, key string, kind editKind, v any) (any, bool) {
	switch c := node.(type) {
	case map[string]any:
		if c == nil {
			return nil, false
		}
		if kind == editRemove {
			if _, found := c[key]; !found {
				return nil, false
			}
			m := s.own(c)
			delete(m, key)
			return m, true
		}
		m := s.own(c)
		m[key] = v
		return m, true
	case []any:
		if c == nil {
			return nil, false
		}
		switch kind {
		case editAdd:
			i := len(c)
			if key != "-" {
				var good bool
				if i, good = arrayIndex(key, len(c)); !good {
					return nil, false
				}
			}
			a := make([]any, len(c)+1)
			copy(a, c[:i])
			a[i] = v
			copy(a[i+1:], c[i:])
			return a, true
		case editReplace:
			i, good := arrayIndex(key, len(c)-1)
			if !good {
				return nil, false
			}
			a := make([]any, len(c))
			copy(a, c)
			a[i] = v
			return a, true
		case editRemove:
			i, good := arrayIndex(key, len(c)-1)
			if !good {
				return nil, false
			}
			a := make([]any, len(c)-1)
			copy(a, c[:i])
			copy(a[i:], c[i+1:])
			return a, true
		}
	}
	return nil, false
}

// own returns m if this application allocated it, else a copy it owns.
func (s *patchState) own(m map[string]any) map[string]any {
	p := mapPointer(m)
	for _, o := range s.owned {
		if o == p {
			return m
		}
	}
	n := make(map[string]any, len(m)+1)
	maps.Copy(n, m)
	s.owned = append(s.owned, mapPointer(n))
	return n
}

// mapPointer is a map's identity.
func mapPointer(m map[string]any) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&m))
}

type eqResult uint8

const (
	eqTrue eqResult = iota
	eqFalse
	eqUnsure
)

// jsonEqual is v4's lazyNode.equal of a document value n (never nil) and a
// test op's value o.
func jsonEqual(n, o any) eqResult {
	switch nv := n.(type) {
	case map[string]any:
		if nv == nil {
			return eqUnsure
		}
		switch ov := o.(type) {
		case map[string]any:
			if ov == nil {
				return eqUnsure
			}
			if len(nv) != len(ov) {
				return eqFalse
			}
			// v4 ranges over a Go map and stops at the first difference:
			// when some pair is unsure (an array with a null panics), the
			// outcome depends on the order.
			res := eqTrue
			for k, v := range nv {
				w, found := ov[k]
				var r eqResult
				switch {
				case !found || (v == nil) != (w == nil):
					r = eqFalse
				case v == nil:
					r = eqTrue
				default:
					r = jsonEqual(v, w)
				}
				if r == eqUnsure {
					return eqUnsure
				}
				if r == eqFalse {
					res = eqFalse
				}
			}
			return res
		case []any, string, int64, float64, bool:
			return eqFalse
		}
		return eqUnsure
	case []any:
		if nv == nil {
			return eqUnsure
		}
		switch ov := o.(type) {
		case []any:
			if ov == nil {
				return eqUnsure
			}
			if len(nv) != len(ov) {
				return eqFalse
			}
			for i := range nv {
				if nv[i] == nil || ov[i] == nil {
					return eqUnsure // v4 calls equal on a nil node
				}
				if r := jsonEqual(nv[i], ov[i]); r != eqTrue {
					return r
				}
			}
			return eqTrue
		case map[string]any, string, int64, float64, bool:
			return eqFalse
		}
		return eqUnsure
	case string:
		switch ov := o.(type) {
		case string:
			if nv != ov {
				return eqFalse
			}
			if mayEscapeDifferently(nv) {
				return eqUnsure
			}
			return eqTrue
		case map[string]any, []any, int64, float64, bool:
			return eqFalse
		}
		return eqUnsure
	case bool:
		switch ov := o.(type) {
		case bool:
			if nv == ov {
				return eqTrue
			}
			return eqFalse
		case map[string]any, []any, string, int64, float64:
			return eqFalse
		}
		return eqUnsure
	case int64, float64:
		switch o.(type) {
		case int64, float64:
			return numberEqual(n, o)
		case map[string]any, []any, string, bool:
			return eqFalse
		}
		return eqUnsure
	}
	return eqUnsure
}

// numberEqual compares two numbers as v4 does, by their JSON bytes:
// encoding/json's and protojson's float formatting are the same algorithm,
// so equal values print alike and different ones differ. An integral
// float64 below 2^63 is not in decoded form (it would have decoded to an
// int64): unsure.
func numberEqual(a, b any) eqResult {
	ai, aInt := a.(int64)
	bi, bInt := b.(int64)
	af, _ := a.(float64)
	bf, _ := b.(float64)
	if !aInt && notDecodedForm(af) || !bInt && notDecodedForm(bf) {
		return eqUnsure
	}
	switch {
	case aInt && bInt:
		return boolResult(ai == bi)
	case !aInt && !bInt:
		if af == 0 || math.IsNaN(af) || math.IsInf(af, 0) {
			return eqUnsure
		}
		return boolResult(af == bf)
	default:
		// An int64 prints as digits; a non-integral float has '.' or an
		// exponent; an integral one from 2^63 has more digits or 'e'.
		return eqFalse
	}
}

func notDecodedForm(f float64) bool {
	return f == math.Trunc(f) && math.Abs(f) < 1<<63
}

func boolResult(b bool) eqResult {
	if b {
		return eqTrue
	}
	return eqFalse
}

// mayEscapeDifferently reports whether a string holds a byte that JSON
// encoders escape in different ways (control characters, quotes,
// backslashes, HTML characters, DEL, anything non-ASCII): v4 compares
// scalars by their encodings.
func mayEscapeDifferently(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return true
		}
	}
	return false
}
