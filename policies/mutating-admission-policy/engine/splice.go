package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	sigsjson "sigs.k8s.io/json"
)

// spliceTyped is the typed object that decoding newContent's JSON encoding
// into a new object of old's type gives (strictly for the JSON patcher, as
// decodePatched does; case-sensitively with integers kept otherwise, as
// typedFromUnstructured does), built without decoding what did not change.
//
// A mutation usually touches a label or one list; converting the whole
// result back to a typed object was most of an evaluation on real objects
// (42% of an apply configuration on a 5 KB Pod). old is the typed object the
// mutation started from and oldContent its canonical content (what
// canonicalObject computed from it, so decoding oldContent[f] gives old's
// field f). The result starts as a deep copy of old, normalized so that it
// holds what decoding its own encoding would give (see normalizeOmitEmpty);
// then, struct by struct along the changed paths, every field whose content
// changed is decoded from the new content (all changed fields of one struct
// in one decoding of a partial object: decoding a JSON object into a struct
// sets each field from its member alone, so this is the decoding of the whole
// object, field by field), and a field whose member is gone is zeroed, as a
// decoding into a new object leaves it.
//
// It declines (ok=false) whenever it could not be that decoding's result: a
// type whose JSON round trip is not exact (jsonRoundTripExact), a struct whose
// fields it cannot map to member names exactly, a member no field takes
// (unknown to the strict decoder, dropped by the other: either way the caller's
// full decoding decides), a null, and any error of the partial decodings. The
// caller then converts the whole object as before.
func spliceTyped(old runtime.Object, oldContent, newContent map[string]any, strict bool) (runtime.Object, bool) {
	t := reflect.TypeOf(old)
	if oldContent == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || !jsonRoundTripExact(t) {
		return nil, false
	}
	obj := old.DeepCopyObject()
	v := reflect.ValueOf(obj).Elem()
	normalizeOmitEmpty(v)
	if !spliceStruct(v, oldContent, newContent, strict) {
		return nil, false
	}
	return obj, true
}

// spliceStruct makes the struct v (a field-by-field decoding of oldC, see
// spliceTyped) the decoding of newC.
func spliceStruct(v reflect.Value, oldC, newC map[string]any, strict bool) bool {
	fields := structFields(v.Type())
	if fields == nil {
		return false
	}
	known := 0
	var partial map[string]any
	var changed []*jsonField
	for i := range fields.list {
		f := &fields.list[i]
		nv, inNew := newC[f.name]
		if !inNew {
			v.FieldByIndex(f.index).SetZero()
			continue
		}
		known++
		ov, inOld := oldC[f.name]
		if inOld && sameContent(ov, nv) {
			continue
		}
		if nv == nil {
			return false
		}
		if nm, ok := nv.(map[string]any); ok {
			if om, ok := ov.(map[string]any); ok && inOld {
				if sv, ok := spliceTarget(v.FieldByIndex(f.index)); ok {
					if !spliceStruct(sv, om, nm, strict) {
						return false
					}
					continue
				}
			}
		}
		if partial == nil {
			partial = make(map[string]any, len(newC))
		}
		partial[f.name] = nv
		changed = append(changed, f)
	}
	if known != len(newC) {
		return false // a member no field takes
	}
	if partial == nil {
		return true
	}
	b, ok := encodeUnstructured(partial)
	if !ok {
		return false
	}
	fresh := reflect.New(v.Type())
	if decodeJSON(b, fresh.Interface(), strict) != nil {
		return false
	}
	for _, f := range changed {
		v.FieldByIndex(f.index).Set(fresh.Elem().FieldByIndex(f.index))
	}
	return true
}

// spliceTarget is the struct a changed object member can be spliced into:
// the field itself when it is a struct, what it points to when it is a
// non-nil pointer to one (the copy's own), provided the JSON decoder fills
// that struct member by member (no custom unmarshaller).
func spliceTarget(fv reflect.Value) (reflect.Value, bool) {
	if fv.Kind() == reflect.Pointer {
		if fv.IsNil() {
			return reflect.Value{}, false
		}
		fv = fv.Elem()
	}
	if fv.Kind() != reflect.Struct || structFields(fv.Type()) == nil {
		return reflect.Value{}, false
	}
	return fv, true
}

// sameContent is deep equality of unstructured content (maps, slices,
// strings, int64, float64, bool, nil), short-cutting the subtrees a merge
// shares with the object it started from. Anything else is "not the same".
func sameContent(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		if reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() {
			return true
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !sameContent(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		if len(x) > 0 && &x[0] == &y[0] {
			return true
		}
		for i := range x {
			if !sameContent(x[i], y[i]) {
				return false
			}
		}
		return true
	case string:
		y, ok := b.(string)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

// jsonField is a struct field as the JSON decoder sees it: its member name
// and its index path (through inlined embedded structs).
type jsonField struct {
	name  string
	index []int
}

type jsonFields struct {
	list []jsonField
}

var jsonFieldCache sync.Map // reflect.Type -> *jsonFields (nil: not spliceable)

var (
	jsonUnmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	jsonMarshalerType   = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
)

// customJSON is whether t has its own JSON encoding or decoding: its members
// are then not its fields.
func customJSON(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(jsonUnmarshalerType) || p.Implements(jsonMarshalerType)
}

// plainMemberName is whether encoding/json takes a tag name as it is (the
// characters of Kubernetes' member names; it ignores names it finds invalid).
func plainMemberName(name string) bool {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == '$' || r == '/') {
			return false
		}
	}
	return name != ""
}

// structFields lists the members the JSON decoder fills in a struct of type
// t, or nil when splicing cannot follow it exactly: a custom unmarshaller,
// an embedded pointer or non-struct, a field whose name it cannot tell
// (tag options it does not know, two fields of one name).
func structFields(t reflect.Type) *jsonFields {
	if c, ok := jsonFieldCache.Load(t); ok {
		return c.(*jsonFields)
	}
	fs := &jsonFields{}
	seen := map[string]bool{}
	if t.Kind() != reflect.Struct || customJSON(t) || !collectFields(t, nil, fs, seen) {
		fs = nil
	}
	jsonFieldCache.Store(t, fs)
	return fs
}

func collectFields(t reflect.Type, prefix []int, fs *jsonFields, seen map[string]bool) bool {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		index := append(append([]int(nil), prefix...), i)
		if f.Anonymous && name == "" {
			// encoding/json inlines an embedded struct without a name.
			if !f.IsExported() || f.Type.Kind() != reflect.Struct || customJSON(f.Type) {
				return false
			}
			if !collectFields(f.Type, index, fs, seen) {
				return false
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !plainMemberName(name) {
			return false
		}
		if seen[name] {
			return false // encoding/json's dominance rules: not followed here
		}
		seen[name] = true
		fs.list = append(fs.list, jsonField{name: name, index: index})
	}
	return true
}

// normalizeOmitEmpty sets the empty non-nil maps and slices of omitempty
// fields to nil, everywhere in v. They are the one thing a typed object
// holds that its JSON encoding loses (the member is left out, and decoding
// gives nil), and defaulting tells nil from empty: after this, the fields
// of v are what decoding v's encoding gives (up to the cached string of a
// Quantity and the sub-second part of a Time, which the encoding drops too
// and nothing observable reads).
func normalizeOmitEmpty(v reflect.Value) {
	if !mayHoldOmitEmpty(v.Type()) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalizeOmitEmpty(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			normalizeOmitEmpty(v.Index(i))
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			normalizeOmitEmpty(e)
			v.SetMapIndex(it.Key(), e)
		}
	case reflect.Struct:
		plan := omitEmptyPlan(v.Type())
		for _, i := range plan.empty {
			if f := v.Field(i); f.Len() == 0 && !f.IsNil() {
				f.SetZero()
			}
		}
		for _, i := range plan.nested {
			normalizeOmitEmpty(v.Field(i))
		}
	}
}

type omitPlan struct {
	empty  []int // omitempty maps and slices
	nested []int // fields whose values may hold some
}

var omitPlans sync.Map // reflect.Type -> *omitPlan

func omitEmptyPlan(t reflect.Type) *omitPlan {
	if p, ok := omitPlans.Load(t); ok {
		return p.(*omitPlan)
	}
	p := &omitPlan{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		omit := false
		for _, o := range strings.Split(opts, ",") {
			omit = omit || o == "omitempty"
		}
		if omit && (f.Type.Kind() == reflect.Map || f.Type.Kind() == reflect.Slice) {
			p.empty = append(p.empty, i)
		}
		if mayHoldOmitEmpty(f.Type) {
			p.nested = append(p.nested, i)
		}
	}
	omitPlans.Store(t, p)
	return p
}

var omitHolders sync.Map // reflect.Type -> bool

// mayHoldOmitEmpty is whether a value of type t can contain an omitempty
// map or slice field.
func mayHoldOmitEmpty(t reflect.Type) bool {
	if v, ok := omitHolders.Load(t); ok {
		return v.(bool)
	}
	omitHolders.Store(t, false) // recursive types: assume no until known
	r := holdsOmitEmpty(t, map[reflect.Type]bool{})
	omitHolders.Store(t, r)
	return r
}

func holdsOmitEmpty(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsOmitEmpty(t.Elem(), seen)
	case reflect.Map:
		return holdsOmitEmpty(t.Elem(), seen)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			for _, o := range strings.Split(opts, ",") {
				if o == "omitempty" && (f.Type.Kind() == reflect.Map || f.Type.Kind() == reflect.Slice) {
					return true
				}
			}
			if holdsOmitEmpty(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// spliceResult is spliceTyped for a mutation's result: the typed object of
// content, built from the wrapped typed object the mutation started from
// (ok=false when it was not a canonicalObject of the versioned kind's own
// type, with its content converted, or when spliceTyped declines). The
// apply configuration's conversion additionally requires the result's kind
// to be the versioned kind, as typedFromUnstructured does.
func (e *Engine) spliceResult(versioned *admission.VersionedAttributes, content map[string]any, strict bool) (runtime.Object, bool) {
	w, ok := versioned.VersionedObject.(*canonicalObject)
	if !ok || w.content == nil || w.state.failed {
		return nil, false
	}
	kind := versioned.VersionedKind
	if !strict {
		apiVersion, kindName := kind.ToAPIVersionAndKind()
		if content["apiVersion"] != apiVersion || content["kind"] != kindName || kind != versioned.GetKind() {
			return nil, false
		}
	}
	if t, ok := e.scheme.AllKnownTypes()[kind]; !ok || reflect.TypeOf(w.typed) != reflect.PointerTo(t) {
		return nil, false
	}
	return spliceTyped(w.typed, w.content, content, strict)
}

// decodeJSON is the JSON patcher's strict decoding (unknown and duplicate
// fields are errors) or the case-sensitive decoding of decodeTyped.
func decodeJSON(b []byte, v any, strict bool) error {
	if !strict {
		return sigsjson.UnmarshalCaseSensitivePreserveInts(b, v)
	}
	errs, err := sigsjson.UnmarshalStrict(b, v)
	if err == nil && len(errs) > 0 {
		err = errs[0]
	}
	return err
}
