package engine

import (
	"errors"
	"time"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/match"
)

// Gatekeeper's webhook decodes a Namespace request's object, and its
// controller the Namespace objects it reads from the cluster, into a
// k8s.io/api/core/v1 Namespace (sigs.k8s.io/json: encoding/json with
// case-sensitive keys; unknown fields ignored, null leaves the zero value).
// A field of the wrong JSON type fails the decode, and so the request. The
// checker below walks the same typed fields, without reflection.

// fieldType checks one JSON value against the Go type of a field.
type fieldType func(v *jsonv.Value) bool

func tString(v *jsonv.Value) bool { return v.K == jsonv.Null || v.K == jsonv.String }

func tBool(v *jsonv.Value) bool { return v.K == jsonv.Null || v.K == jsonv.Bool }

// tInt64: encoding/json takes only an integer literal that fits (jsonv's
// Int); 1.0, 1e3 and overflowing literals are Float.
func tInt64(v *jsonv.Value) bool { return v.K == jsonv.Null || v.K == jsonv.Int }

// tTime is metav1.Time's UnmarshalJSON: null, or an RFC 3339 string.
func tTime(v *jsonv.Value) bool {
	if v.K == jsonv.Null {
		return true
	}
	if v.K != jsonv.String {
		return false
	}
	_, err := time.Parse(time.RFC3339, v.S)
	return err == nil
}

// tAny is metav1.FieldsV1 (raw JSON).
func tAny(*jsonv.Value) bool { return true }

func tMapOf(elem fieldType) fieldType {
	return func(v *jsonv.Value) bool {
		if v.K == jsonv.Null {
			return true
		}
		if v.K != jsonv.Object {
			return false
		}
		for _, e := range v.O.Vals {
			if !elem(e) {
				return false
			}
		}
		return true
	}
}

func tListOf(elem fieldType) fieldType {
	return func(v *jsonv.Value) bool {
		if v.K == jsonv.Null {
			return true
		}
		if v.K != jsonv.Array {
			return false
		}
		for _, e := range v.A {
			if !elem(e) {
				return false
			}
		}
		return true
	}
}

type field struct {
	name string
	typ  fieldType
}

func tStruct(fields ...field) fieldType {
	return func(v *jsonv.Value) bool {
		if v.K == jsonv.Null {
			return true
		}
		if v.K != jsonv.Object {
			return false
		}
		for _, f := range fields {
			if e, ok := v.O.Get(f.name); ok && !f.typ(e) {
				return false
			}
		}
		return true
	}
}

var namespaceType = tStruct(
	field{"apiVersion", tString},
	field{"kind", tString},
	field{"metadata", tStruct(
		field{"name", tString},
		field{"generateName", tString},
		field{"namespace", tString},
		field{"selfLink", tString},
		field{"uid", tString},
		field{"resourceVersion", tString},
		field{"generation", tInt64},
		field{"creationTimestamp", tTime},
		field{"deletionTimestamp", tTime},
		field{"deletionGracePeriodSeconds", tInt64},
		field{"labels", tMapOf(tString)},
		field{"annotations", tMapOf(tString)},
		field{"ownerReferences", tListOf(tStruct(
			field{"apiVersion", tString},
			field{"kind", tString},
			field{"name", tString},
			field{"uid", tString},
			field{"controller", tBool},
			field{"blockOwnerDeletion", tBool},
		))},
		field{"finalizers", tListOf(tString)},
		field{"managedFields", tListOf(tStruct(
			field{"manager", tString},
			field{"operation", tString},
			field{"apiVersion", tString},
			field{"time", tTime},
			field{"fieldsType", tString},
			field{"fieldsV1", tAny},
			field{"subresource", tString},
		))},
	)},
	field{"spec", tStruct(field{"finalizers", tListOf(tString)})},
	field{"status", tStruct(
		field{"phase", tString},
		field{"conditions", tListOf(tStruct(
			field{"type", tString},
			field{"status", tString},
			field{"lastTransitionTime", tTime},
			field{"reason", tString},
			field{"message", tString},
		))},
	)},
)

// errNamespaceObject: the object does not decode as a v1 Namespace.
var errNamespaceObject = errors.New("the object does not decode as a v1 Namespace (a field has the wrong type)")

// namespaceOf decodes a Namespace object as Gatekeeper does (see above): its
// name and labels (a null label value is "").
func namespaceOf(v *jsonv.Value) (*match.Namespace, error) {
	jsonv.LoadAll(v) // the type check ranges over every field
	if v == nil || v.K != jsonv.Object || !namespaceType(v) {
		return nil, errNamespaceObject
	}
	md := v.Field("metadata")
	ns := &match.Namespace{}
	ns.Name, _ = md.Field("name").Str()
	if l := md.Field("labels"); l != nil && l.K == jsonv.Object {
		ns.Labels = make(map[string]string, len(l.O.Keys))
		for i, k := range l.O.Keys {
			ns.Labels[k] = l.O.Vals[i].S
		}
	}
	return ns, nil
}
