package engine

import (
	"sigs.k8s.io/structured-merge-diff/v6/schema"
)

// A fast path for ApplyConfiguration mutations.
//
// patch.ApplyStructuredMergeDiff converts the live object and the apply
// configuration to structured-merge-diff (SMD) typed values (validating
// both), rejects a patch that touches anything atomic, merges, and converts
// back. In Wasm that is about 400 us of a 1.1 ms mutation, mostly spent
// allocating values for parts of the object the patch does not touch.
//
// fastApply computes the same result by walking the patch once with schema
// lookups, copying only the maps and lists along the patched paths. Parts of
// the live object the patch does not touch are only checked (SMD's
// validation of the live object has to pass for the merge to succeed), never
// copied: SMD rebuilds them into values that are deep-equal to the originals,
// so sharing them gives the same content.
//
// It vouches only for what it reproduces exactly, and declines (ok=false)
// everything else, so that the caller runs ApplyStructuredMergeDiff, which
// also produces every error message. The facts of SMD v6.3.3 it relies on:
//
//   - Validation (ObjectToTyped): a map key is a declared field or, if the map
//     has an element type, an element; otherwise "field not declared in
//     schema". Scalars are checked by kind (numeric: Go ints up to 32 bits
//     unsigned, int64, floats; string; boolean; untyped: any of those).
//     Associative lists need map elements with at least one key field set or
//     defaulted (list-maps) or non-null scalar elements (sets); duplicate keys
//     are an error in the patch, allowed in the live object. A null is valid
//     anywhere.
//   - validatePatch rejects any atomic list or map reached by a map or list
//     value of the patch; fastApply declines any atomic it meets in the patch
//     (a superset: findAtomics does not look below undeclared map keys).
//   - Merge keeps the patch's value for scalars; maps merge key by key; a map
//     or list that is empty (or null/missing) on both sides takes the patch's
//     value; an empty patch map or list keeps the live one.
//   - Associative lists merge by key, a patch item into the live item of the
//     same key, in the order of merge.go's visitListItems, reproduced step by
//     step in mergeOrder (roughly: live items in place, items of the patch in
//     the patch's order). A key that the live list holds more than once
//     collapses into the patch item alone; a live item whose key the patch
//     does not set stays as it is, duplicates included.
//
// Declined: nulls and non-JSON Go types in the patch, anything atomic in the
// patch, unknown fields or type mismatches anywhere, lists that are neither
// atomic nor associative, list keys that are floats or null, a live value of
// a different kind than the patch value at the same place (only possible
// with the untyped types of RawExtension and schemaless kinds), a patch whose
// apiVersion/kind differ from the live object's.

// fastApply merges an apply-configuration patch into the live object's
// unstructured content the way patch.ApplyStructuredMergeDiff does, for the
// cases it can vouch for. ok=false means "not vouched for": the caller runs
// ApplyStructuredMergeDiff (which also produces every error message).
//
// s and root are the schema and type the type converter of the object's kind
// uses (see typeConverters.mergeSchema). patch must carry the apiVersion and
// kind that the patcher sets on it (those of the live object).
//
// Neither live nor patch is modified. The result holds new maps and lists
// along the paths the patch sets; every subtree of live the patch does not
// touch is shared with live, and scalars are shared with the patch. A caller
// that mutates the result in place must copy it first.
func fastApply(s *schema.Schema, root schema.TypeRef, live, patch map[string]any) (merged map[string]any, ok bool) {
	if s == nil || live == nil || patch == nil {
		return nil, false
	}
	// ApplyStructuredMergeDiff requires equal GroupVersionKinds; equal strings
	// give equal GVKs.
	for _, k := range [...]string{"apiVersion", "kind"} {
		pv, ok1 := patch[k].(string)
		lv, ok2 := live[k].(string)
		if !ok1 || !ok2 || pv != lv {
			return nil, false
		}
	}
	w := fastMerger{s: s}
	out, ok := w.merge(root, live, true, patch)
	if !ok {
		return nil, false
	}
	m, ok := out.(map[string]any)
	return m, ok
}

type fastMerger struct {
	s *schema.Schema
}

// Kinds of unstructured values, as SMD's value.Value tells them apart.
const (
	kindNull = iota
	kindScalar
	kindList
	kindMap
	kindOther // not a value SMD's unstructured reader accepts (or one fastApply declines)
)

func kindOf(v any) int {
	switch v.(type) {
	case nil:
		return kindNull
	case string, bool, int64, float64, int, int32, int16, int8, uint, uint32, uint16, uint8, float32:
		return kindScalar
	case []any:
		return kindList
	case map[string]any:
		return kindMap
	}
	// map[interface{}]interface{} is a valid SMD map, but SMD rebuilds it
	// as map[string]interface{}: declined rather than reproduced.
	return kindOther
}

// validScalar is SMD's validateScalar for a non-null scalar.
func validScalar(t schema.Scalar, v any) bool {
	switch t {
	case schema.Numeric:
		switch v.(type) {
		case int64, float64, int, int32, int16, int8, uint, uint32, uint16, uint8, float32:
			return true
		}
	case schema.String:
		_, ok := v.(string)
		return ok
	case schema.Boolean:
		_, ok := v.(bool)
		return ok
	case schema.Untyped:
		return kindOf(v) == kindScalar
	}
	return false
}

// fieldType is the type of key k of a map: its field's, else the element
// type; ok=false for a field not declared in the schema.
func fieldType(m *schema.Map, k string) (schema.TypeRef, bool) {
	if sf, ok := m.FindField(k); ok {
		return sf.Type, true
	}
	if m.ElementType == (schema.TypeRef{}) {
		return schema.TypeRef{}, false
	}
	return m.ElementType, true
}

// valid reports whether SMD's validation of the live object accepts v as a
// tr (duplicate keys allowed), for a value the merge keeps as it is.
func (w *fastMerger) valid(tr schema.TypeRef, v any) bool {
	a, ok := w.s.Resolve(tr)
	if !ok {
		return false
	}
	switch kindOf(v) {
	case kindNull:
		return a.Map != nil || a.Scalar != nil || a.List != nil
	case kindScalar:
		return a.Scalar != nil && validScalar(*a.Scalar, v)
	case kindList:
		return a.List != nil && w.validList(a.List, v.([]any))
	case kindMap:
		return a.Map != nil && w.validMap(a.Map, v.(map[string]any))
	}
	return false
}

func (w *fastMerger) validMap(m *schema.Map, v map[string]any) bool {
	for k, child := range v {
		tr, ok := fieldType(m, k)
		if !ok || !w.valid(tr, child) {
			return false
		}
	}
	return true
}

func (w *fastMerger) validList(l *schema.List, v []any) bool {
	switch l.ElementRelationship {
	case schema.Atomic:
	case schema.Associative:
		for _, item := range v {
			if !w.validItemKey(l, item) {
				return false
			}
		}
	default:
		// A non-associative granular list cannot be merged by SMD (it
		// errors on indexing it); there are none in the built-in schema.
		return false
	}
	for _, item := range v {
		if !w.valid(l.ElementType, item) {
			return false
		}
	}
	return true
}

// validItemKey is SMD's listItemToPathElement succeeding, for a live item of
// an associative list that is kept as it is (any key values).
func (w *fastMerger) validItemKey(l *schema.List, item any) bool {
	if len(l.Keys) == 0 {
		return kindOf(item) == kindScalar
	}
	m, ok := item.(map[string]any)
	if !ok {
		return false
	}
	for _, name := range l.Keys {
		if _, ok := m[name]; ok {
			return true
		}
		if def, ok := w.keyDefault(l, name); !ok {
			return false
		} else if def != nil {
			return true
		}
	}
	return false
}

// keyDefault is the default value of key field name of a list-map's
// elements (nil: none); ok=false where SMD errors.
func (w *fastMerger) keyDefault(l *schema.List, name string) (def any, ok bool) {
	a, ok := w.s.Resolve(l.ElementType)
	if !ok || a.Map == nil {
		return nil, false
	}
	sf, _ := a.Map.FindField(name)
	return sf.Default, true
}

// merge merges patch value pv into live value lv (present or not) of type
// tr, validating both. ok=false: not vouched for.
func (w *fastMerger) merge(tr schema.TypeRef, lv any, lpresent bool, pv any) (any, bool) {
	a, ok := w.s.Resolve(tr)
	if !ok {
		return nil, false
	}
	lkind := kindNull // a null live value merges like a missing one
	if lpresent {
		lkind = kindOf(lv)
	}
	pkind := kindOf(pv)
	if lkind != kindNull && lkind != pkind {
		// Both sides valid with different kinds happens only with the
		// multi-kind untyped types; SMD then handles each side with its
		// own atom. Not reproduced.
		return nil, false
	}
	switch pkind {
	case kindScalar:
		if a.Scalar == nil || !validScalar(*a.Scalar, pv) {
			return nil, false
		}
		if lkind == kindScalar && !validScalar(*a.Scalar, lv) {
			return nil, false
		}
		return pv, true
	case kindMap:
		if a.Map == nil || a.Map.ElementRelationship == schema.Atomic {
			return nil, false
		}
		var lm map[string]any
		if lkind == kindMap {
			lm = lv.(map[string]any)
		}
		return w.mergeMap(a.Map, lm, pv.(map[string]any))
	case kindList:
		if a.List == nil || a.List.ElementRelationship != schema.Associative {
			return nil, false
		}
		var ll []any
		if lkind == kindList {
			ll = lv.([]any)
		}
		return w.mergeList(a.List, ll, pv.([]any))
	}
	// Nulls and non-JSON values in the patch.
	return nil, false
}

func (w *fastMerger) mergeMap(m *schema.Map, lm, pm map[string]any) (any, bool) {
	if len(pm) == 0 {
		if len(lm) == 0 {
			return map[string]any{}, true
		}
		return lm, w.validMap(m, lm)
	}
	out := make(map[string]any, len(lm)+len(pm))
	for k, lv := range lm {
		if _, ok := pm[k]; ok {
			continue
		}
		tr, ok := fieldType(m, k)
		if !ok || !w.valid(tr, lv) {
			return nil, false
		}
		out[k] = lv
	}
	for k, pv := range pm {
		tr, ok := fieldType(m, k)
		if !ok {
			return nil, false
		}
		lv, lpresent := lm[k]
		v, ok := w.merge(tr, lv, lpresent, pv)
		if !ok {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}

// maxKeyFields bounds the key fields of a list-map fastApply handles (the
// built-in schema has at most 4: ResourceClaimStatus.devices).
const maxKeyFields = 4

// keyValue is one key field's value, comparable; set is false for a key
// field that is absent (and has no default).
type keyValue struct {
	set  bool
	kind uint8 // 's', 'i', 'b'
	s    string
	i    int64
	b    bool
}

// itemKey identifies an element of an associative list: SMD's path element
// of the item, in a form compared with ==. Two keys are equal exactly when
// SMD's path elements are (same key fields present, equal values).
type itemKey [maxKeyFields]keyValue

// scalarKey is the key value of a scalar; floats (SMD compares them with
// ints numerically) and anything else are declined.
func scalarKey(v any) (keyValue, bool) {
	switch x := v.(type) {
	case string:
		return keyValue{set: true, kind: 's', s: x}, true
	case bool:
		return keyValue{set: true, kind: 'b', b: x}, true
	case int64:
		return keyValue{set: true, kind: 'i', i: x}, true
	case int:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	case int32:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	case int16:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	case int8:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	case uint32:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	case uint16:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	case uint8:
		return keyValue{set: true, kind: 'i', i: int64(x)}, true
	}
	return keyValue{}, false
}

// keyOf is the key of an item of associative list l; ok=false for items
// SMD rejects and for keys fastApply declines.
func (w *fastMerger) keyOf(l *schema.List, item any) (itemKey, bool) {
	var k itemKey
	if len(l.Keys) == 0 {
		kv, ok := scalarKey(item)
		k[0] = kv
		return k, ok
	}
	if len(l.Keys) > maxKeyFields {
		return k, false
	}
	m, ok := item.(map[string]any)
	if !ok {
		return k, false
	}
	found := false
	for i, name := range l.Keys {
		v, ok := m[name]
		if !ok {
			def, ok := w.keyDefault(l, name)
			if !ok {
				return k, false
			}
			if def == nil {
				continue
			}
			v = def
		}
		kv, ok := scalarKey(v)
		if !ok {
			return k, false
		}
		k[i] = kv
		found = true
	}
	return k, found
}

func (w *fastMerger) mergeList(l *schema.List, ll, pl []any) (any, bool) {
	if len(pl) == 0 {
		if len(ll) == 0 {
			return []any{}, true
		}
		return ll, w.validList(l, ll)
	}
	pkeys := make([]itemKey, len(pl))
	for i, item := range pl {
		k, ok := w.keyOf(l, item)
		if !ok {
			return nil, false
		}
		for j := 0; j < i; j++ {
			if pkeys[j] == k {
				return nil, false // duplicate entries in the patch
			}
		}
		pkeys[i] = k
	}
	lkeys := make([]itemKey, len(ll))
	for i, item := range ll {
		k, ok := w.keyOf(l, item)
		if !ok {
			return nil, false
		}
		lkeys[i] = k
	}
	// For each patch item, the live item it merges with: -1 none, -2 the
	// key is duplicated in the live list (SMD then merges with nothing).
	lmatch := make([]int, len(pl))
	// For each live item, the patch item of its key, or -1.
	pmatch := make([]int, len(ll))
	for i := range pmatch {
		pmatch[i] = -1
	}
	for p := range pl {
		lmatch[p] = -1
		for i := range ll {
			if lkeys[i] != pkeys[p] {
				continue
			}
			pmatch[i] = p
			if lmatch[p] == -1 {
				lmatch[p] = i
			} else {
				lmatch[p] = -2
			}
		}
	}
	// Live items kept as they are (not merged with a patch item, or
	// duplicates that collapse) are still validated by SMD.
	for i, item := range ll {
		if p := pmatch[i]; p < 0 || lmatch[p] == -2 {
			if !w.valid(l.ElementType, item) {
				return nil, false
			}
		}
	}
	out := make([]any, 0, max(len(ll), len(pl)))
	ok := true
	mergeOrder(pmatch, lmatch, func(live, p int) {
		if !ok {
			return
		}
		if p < 0 {
			out = append(out, ll[live])
			return
		}
		var v any
		if i := lmatch[p]; i >= 0 {
			v, ok = w.merge(l.ElementType, ll[i], true, pl[p])
		} else {
			v, ok = w.merge(l.ElementType, nil, false, pl[p])
		}
		out = append(out, v)
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// mergeOrder emits the items of a merged associative list in the order of
// SMD's visitListItems: emit(i, -1) for live item i kept as it is,
// emit(-1, p) for patch item p (merged with its live item, if any).
// pmatch[i] is the patch item with live item i's key (-1: none); lmatch[p]
// is >= 0 when patch item p's key is in the live list once, -2 when it is
// there more than once, -1 when not at all.
func mergeOrder(pmatch, lmatch []int, emit func(live, p int)) {
	nl, np := len(pmatch), len(lmatch)
	// The patch items whose key is in the live list, in patch order: the
	// order in which shared items are expected.
	shared := make([]int, 0, np)
	for p := range np {
		if lmatch[p] != -1 {
			shared = append(shared, p)
		}
	}
	next := -1 // the next expected shared patch item
	pop := func() {
		next = -1
		if len(shared) > 0 {
			next, shared = shared[0], shared[1:]
		}
	}
	pop()
	done := make([]bool, np) // patch items emitted
	li, pi := 0, 0
	for li < nl || pi < np {
		if li < nl && pi < np {
			if pmatch[li] == pi {
				// Same key at both cursors: merge.
				done[pi] = true
				emit(-1, pi)
				li++
				pi++
				pop()
				continue
			}
			if p := pmatch[li]; p >= 0 && next != -1 && next != p {
				// A shared item, but not the one expected now.
				li++
				continue
			}
		}
		if li < nl {
			if p := pmatch[li]; p < 0 {
				emit(li, -1)
				li++
				continue
			} else if done[p] {
				li++
			}
		}
		if pi < np {
			done[pi] = true
			emit(-1, pi)
			if next == pi {
				pop()
			}
			pi++
		}
	}
}
