package engine

import (
	"encoding/json"
	"errors"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// canonicalObject carries a typed object through the apiserver's evaluators
// together with its unstructured form, converted once.
//
// The apiserver holds built-in objects typed. Each CEL evaluation (every
// match-condition set and every mutation) converts the typed object to
// unstructured by reflection (runtime.DefaultUnstructuredConverter), and the
// apply-configuration patcher converts it again, by reflection, to a
// structured-merge value. Those conversions were a quarter of an evaluation.
// A canonicalObject answers all of them from one conversion and otherwise
// behaves exactly like the typed object it wraps:
//
//   - CEL's activation calls ToUnstructured, which returns the content of any
//     runtime.Unstructured as is: the content is ToUnstructured(typed), what
//     the activation would have computed;
//   - the JSONPatch patcher encodes the object with encoding/json: MarshalJSON
//     is the typed object's encoding, byte for byte; it decodes the patched
//     JSON into a new typed object (the wrapper is not an
//     *unstructured.Unstructured), as it would;
//   - the apply-configuration patcher gets canonicalConverter, which gives
//     the structured-merge parser the unstructured content instead of the
//     typed struct (the same value: both conversions follow the JSON tags,
//     and TestCanonicalMatchesTyped checks it);
//   - patchOne unwraps what a patcher returns before converting it.
//
// The conversion is lazy (an object nobody reads is never converted). If it
// fails, the content is empty and the failure is recorded in the evaluation
// state: Evaluate then discards the result and runs the request again on
// plain typed objects, so that the error is the apiserver's.
type canonicalObject struct {
	typed   runtime.Object
	content map[string]any
	encoded []byte
	state   *fastState
}

// fastState is shared by the wrappers of one evaluation.
type fastState struct {
	// failed is set when a conversion failed: the evaluation must be redone
	// on the exact path.
	failed bool
	// request is the request variable of the mutations, converted on first
	// use (set by dispatch once the match is known).
	request func() *admissionRequestInput
	// object is the wrapper of the request's object, whose encoding
	// Evaluate reuses.
	object *canonicalObject
}

// encode is json.Marshal of an object, reusing a canonicalObject's encoding.
func encode(obj runtime.Object) ([]byte, error) {
	if c, ok := obj.(*canonicalObject); ok {
		return c.MarshalJSON()
	}
	return json.Marshal(obj)
}

var errNotWrapped = errors.New("not a canonical object")

// wrapTyped wraps a typed object; unstructured objects (and nil) are returned
// as they are, they need no conversion.
func wrapTyped(obj runtime.Object, state *fastState) runtime.Object {
	switch o := obj.(type) {
	case nil, *unstructured.Unstructured, *canonicalObject:
		return obj
	default:
		return &canonicalObject{typed: o, state: state}
	}
}

// unwrap returns the typed object a canonicalObject carries, or obj itself.
func unwrap(obj runtime.Object) runtime.Object {
	if c, ok := obj.(*canonicalObject); ok {
		return c.typed
	}
	return obj
}

func (c *canonicalObject) GetObjectKind() schema.ObjectKind { return c.typed.GetObjectKind() }

func (c *canonicalObject) DeepCopyObject() runtime.Object {
	return &canonicalObject{typed: c.typed.DeepCopyObject(), state: c.state}
}

// UnstructuredContent is ToUnstructured of the typed object, computed once.
// It must not be modified (nothing in the evaluators does).
//
// For the types whose JSON encoding decodes to exactly ToUnstructured's
// result (see jsonRoundTripExact), it is computed by decoding the typed
// object's encoding, which the evaluation needs anyway, rather than by
// reflection: half the time in Wasm.
func (c *canonicalObject) UnstructuredContent() map[string]any {
	if c.content == nil {
		var u map[string]any
		var err error
		if jsonRoundTripExact(reflect.TypeOf(c.typed)) {
			var b []byte
			if b, err = c.MarshalJSON(); err == nil {
				var ok bool
				if u, ok = decodeUnstructured(b); !ok {
					err = sigsjson.UnmarshalCaseSensitivePreserveInts(b, &u)
				}
			}
		} else {
			u, err = runtime.DefaultUnstructuredConverter.ToUnstructured(c.typed)
		}
		if err != nil || u == nil {
			c.state.failed = true
			u = map[string]any{}
		}
		c.content = u
	}
	return c.content
}

// SetUnstructuredContent is not used by the evaluators; it replaces the
// content without touching the typed object, so it marks the evaluation for
// the exact path.
func (c *canonicalObject) SetUnstructuredContent(m map[string]any) {
	c.state.failed = true
	c.content = m
}

func (c *canonicalObject) NewEmptyInstance() runtime.Unstructured {
	return &unstructured.Unstructured{}
}
func (c *canonicalObject) IsList() bool { return false }
func (c *canonicalObject) EachListItem(func(runtime.Object) error) error {
	return errNotWrapped
}
func (c *canonicalObject) EachListItemWithAlloc(func(runtime.Object) error) error {
	return errNotWrapped
}

// GetObjectMeta makes meta.Accessor see the typed object's metadata.
func (c *canonicalObject) GetObjectMeta() metav1.Object {
	m, err := meta.Accessor(c.typed)
	if err != nil {
		return nil
	}
	return m
}

// MarshalJSON is the typed object's encoding, computed once. The bytes are
// shared: callers must not modify them (encoding/json and the JSON
// serializer copy them).
func (c *canonicalObject) MarshalJSON() ([]byte, error) {
	if c.encoded == nil {
		b, err := json.Marshal(c.typed)
		if err != nil {
			return nil, err
		}
		c.encoded = b
	}
	return c.encoded, nil
}

// jsonRoundTripExact reports whether decoding the JSON encoding of a value
// of type t (with sigs.k8s.io/json, integers as int64) gives exactly what
// runtime.DefaultUnstructuredConverter.ToUnstructured gives. ToUnstructured
// follows the JSON tags and encodes the types with custom marshallers
// through their JSON, so the two agree except where a number's Go type is
// not told by its spelling: a float field holding an integral value (2.0 is
// encoded "2" and decodes as int64, ToUnstructured keeps float64), and raw
// JSON (RawExtension, interface values) which ToUnstructured decodes with
// k8s.io/apimachinery/pkg/util/json, turning integral floats into int64.
// Types with any such field keep ToUnstructured. TestJSONRoundTripExact
// checks the claim on randomly filled objects of every built-in kind.
func jsonRoundTripExact(t reflect.Type) bool {
	if v, ok := roundTripExact.Load(t); ok {
		return v.(bool)
	}
	exact := !hasInexactField(t, map[reflect.Type]bool{})
	roundTripExact.Store(t, exact)
	return exact
}

var roundTripExact sync.Map // reflect.Type -> bool

var rawExtensionType = reflect.TypeOf(runtime.RawExtension{})

func hasInexactField(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if t == rawExtensionType {
		return true
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Interface, reflect.Complex64, reflect.Complex128,
		reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return hasInexactField(t.Elem(), seen)
	case reflect.Map:
		return hasInexactField(t.Key(), seen) || hasInexactField(t.Elem(), seen)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() && f.Tag.Get("json") != "-" && hasInexactField(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

var (
	_ runtime.Unstructured        = &canonicalObject{}
	_ metav1.ObjectMetaAccessor   = &canonicalObject{}
	_ json.Marshaler              = &canonicalObject{}
	_ managedfields.TypeConverter = canonicalConverter{}
)

// canonicalConverter is a structured-merge type converter that reads a
// canonicalObject through its unstructured content.
type canonicalConverter struct{ managedfields.TypeConverter }

func (c canonicalConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if w, ok := obj.(*canonicalObject); ok {
		u := &unstructured.Unstructured{Object: w.UnstructuredContent()}
		return c.TypeConverter.ObjectToTyped(u, opts...)
	}
	return c.TypeConverter.ObjectToTyped(obj, opts...)
}

// typedFromUnstructured is the scheme's ConvertToVersion of an unstructured
// object to its own typed kind (the conversion of an apply configuration's
// result), through JSON: FromUnstructured follows the JSON tags and the
// custom unmarshallers, so decoding the content's encoding gives the same
// typed object, and the JSON decoder is the stricter of the two (a value it
// refuses, such as 1.5 for an integer, makes this decline rather than
// truncate). TestTypedFromUnstructured checks it on randomly filled objects.
// It declines (ok=false) whenever the kinds differ or the type is not one
// whose conversions jsonRoundTripExact vouches for.
func (e *Engine) typedFromUnstructured(u *unstructured.Unstructured, kind, target schema.GroupVersionKind) (runtime.Object, bool) {
	if u.GroupVersionKind() != kind || kind != target {
		return nil, false
	}
	if t, ok := e.scheme.AllKnownTypes()[kind]; !ok || !jsonRoundTripExact(reflect.PointerTo(t)) {
		return nil, false
	}
	b, err := marshalUnstructured(u.Object)
	if err != nil {
		return nil, false
	}
	obj, err := e.decodeTyped(b, kind)
	return obj, err == nil
}

// marshalUnstructured is json.Marshal of unstructured content, by
// encodeUnstructured when it can (the same bytes, without reflection).
func marshalUnstructured(content map[string]any) ([]byte, error) {
	if b, ok := encodeUnstructured(content); ok {
		return b, nil
	}
	return json.Marshal(content)
}
