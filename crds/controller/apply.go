package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// FieldOwner is the field manager of every object the controller writes by server-side apply:
// the PolicyServers' Deployments, Services, ConfigMaps, Secrets, ServiceAccounts,
// PodDisruptionBudgets, Roles, RoleBindings, context-aware ClusterRoles and ClusterRoleBindings,
// and the policies' webhook configurations.
const FieldOwner = "tollgate-controller"

// applyOwned makes the fields of desired that the controller owns what desired says, by a
// server-side apply with FieldOwner (forcing ownership of fields another manager took), and
// reports whether it wrote. live is the stored object (nil when there is none); when the
// fields FieldOwner owns in it, with their stored values, already equal desired, nothing is
// sent: a controller restart against unchanged objects makes no request. Fields of other
// managers are left alone; a field the controller set before and desired no longer has is
// removed by the apply. On a write, desired is replaced by the object as stored.
//
// desired is a typed object built for the purpose: every field it marshals is one the
// controller means to own (nulls, status and the server's metadata are dropped).
func applyOwned(ctx context.Context, c client.Client, desired, live client.Object) (bool, error) {
	gvk, err := apiutil.GVKForObject(desired, c.Scheme())
	if err != nil {
		return false, err
	}
	want, err := applyContent(desired)
	if err != nil {
		return false, err
	}
	want["apiVersion"], want["kind"] = gvk.GroupVersion().String(), gvk.Kind
	if live != nil && !reflect.ValueOf(live).IsNil() {
		if err := upgradeLegacyFields(ctx, c, live); err != nil {
			return false, fmt.Errorf("%s %s: taking over the fields of the %q manager: %w", gvk.Kind, desired.GetName(), LegacyFieldManager, err)
		}
		owned, err := ownedContent(live)
		if err != nil {
			return false, fmt.Errorf("%s %s: reading the fields %s owns: %w", gvk.Kind, desired.GetName(), FieldOwner, err)
		}
		if sameContent(want, owned) {
			return false, nil
		}
	}
	u := &unstructured.Unstructured{Object: want}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return false, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, desired); err != nil {
		return true, fmt.Errorf("%s %s: reading the applied object: %w", gvk.Kind, desired.GetName(), err)
	}
	return true, nil
}

// LegacyFieldManager is the field manager of the controller's writes before it used server-side
// apply: its Updates, named after the binary by client-go's user agent.
const LegacyFieldManager = "tollgate"

// upgradeLegacyFields moves the fields LegacyFieldManager owns in live (by Update) to
// FieldOwner's apply entry (client-go's csaupgrade), once per object written by an older
// controller: otherwise a field the controller stops setting (an env var removed from the
// PolicyServer) would stay, still owned by the old manager. live is updated in place.
func upgradeLegacyFields(ctx context.Context, c client.Client, live client.Object) error {
	legacy := false
	for _, e := range live.GetManagedFields() {
		if e.Manager == LegacyFieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "" {
			legacy = true
			break
		}
	}
	if !legacy {
		return nil
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(LegacyFieldManager), FieldOwner)
	if err != nil || patch == nil {
		return err
	}
	return c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch))
}

// applyContent is desired as an apply configuration: its JSON without nulls, status or the
// metadata the server sets (name, namespace, labels, annotations and ownerReferences kept).
func applyContent(desired client.Object) (map[string]any, error) {
	b, err := json.Marshal(desired)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		keep := map[string]any{}
		for _, k := range []string{"name", "namespace", "labels", "annotations", "ownerReferences"} {
			if v, ok := md[k]; ok {
				keep[k] = v
			}
		}
		m["metadata"] = keep
	}
	return dropNulls(m).(map[string]any), nil
}

// dropNulls removes null values from maps, recursively (empty maps stay: `emptyDir: {}`
// means something).
func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			v[k] = dropNulls(e)
		}
	case []any:
		for i := range v {
			v[i] = dropNulls(v[i])
		}
	}
	return v
}

// ownedContent returns the fields of live that FieldOwner set by apply, with their stored
// values, in the shape of applyContent: the object walked along the FieldsV1 tree of its
// managedFields entry (fieldsOf). It needs no schema: a keyed list item is found by its key
// fields, and list items keep their stored order.
func ownedContent(live client.Object) (map[string]any, error) {
	var entry *metav1.ManagedFieldsEntry
	for i, e := range live.GetManagedFields() {
		if e.Manager == FieldOwner && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" {
			entry = &live.GetManagedFields()[i]
			break
		}
	}
	if entry == nil || entry.FieldsV1 == nil {
		return map[string]any{}, nil
	}
	var fields map[string]any
	if err := json.Unmarshal(entry.FieldsV1.Raw, &fields); err != nil {
		return nil, fmt.Errorf("managedFields of %s: %w", FieldOwner, err)
	}
	b, err := json.Marshal(live)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	out, err := fieldsOf(obj, fields)
	if err != nil {
		return nil, fmt.Errorf("managedFields of %s: %w", FieldOwner, err)
	}
	m, _ := out.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	delete(m, "status") // the controller never applies a status
	return dropNulls(m).(map[string]any), nil
}

// fieldsOf returns the part of v that the FieldsV1 tree fields names: "f:NAME" a field of an
// object, "k:{KEY}" the item of a list whose fields equal KEY, "v:VALUE" an item of a set,
// "i:N" an item by index, "." the node itself. A node without children is a leaf: its whole
// value.
func fieldsOf(v any, fields map[string]any) (any, error) {
	children := 0
	for k := range fields {
		if k != "." {
			children++
		}
	}
	if children == 0 {
		return v, nil
	}
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, sub := range fields {
			name, ok := strings.CutPrefix(k, "f:")
			if !ok {
				continue // "." (a list item's node itself)
			}
			child, present := v[name]
			if !present {
				continue
			}
			subFields, _ := sub.(map[string]any)
			e, err := fieldsOf(child, subFields)
			if err != nil {
				return nil, err
			}
			out[name] = e
		}
		return out, nil
	case []any:
		// Which items are named, and by what: keep the stored order.
		sel := make([]map[string]any, len(v))
		for k, sub := range fields {
			subFields, _ := sub.(map[string]any)
			switch {
			case strings.HasPrefix(k, "k:"):
				var key map[string]any
				if err := json.Unmarshal([]byte(k[2:]), &key); err != nil {
					return nil, fmt.Errorf("list key %s: %w", k, err)
				}
				for i, item := range v {
					if m, ok := item.(map[string]any); ok && hasFields(m, key) {
						sel[i] = subFields
						break
					}
				}
			case strings.HasPrefix(k, "v:"):
				var want any
				if err := json.Unmarshal([]byte(k[2:]), &want); err != nil {
					return nil, fmt.Errorf("set value %s: %w", k, err)
				}
				for i, item := range v {
					if reflect.DeepEqual(item, want) {
						sel[i] = map[string]any{}
						break
					}
				}
			case strings.HasPrefix(k, "i:"):
				i, err := strconv.Atoi(k[2:])
				if err != nil {
					return nil, fmt.Errorf("list index %s: %w", k, err)
				}
				if i >= 0 && i < len(v) {
					sel[i] = subFields
				}
			}
		}
		out := []any{}
		for i, f := range sel {
			if f == nil {
				continue
			}
			e, err := fieldsOf(v[i], f)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	return v, nil // a scalar where the tree goes deeper: take it as it is
}

// hasFields reports whether m holds every field of key with an equal value.
func hasFields(m, key map[string]any) bool {
	for k, want := range key {
		if !reflect.DeepEqual(m[k], want) {
			return false
		}
	}
	return true
}

// sameContent compares an apply configuration with the owned fields of the stored object,
// leaving out the type and the object's name (the managed fields do not hold them).
func sameContent(want, owned map[string]any) bool {
	strip := func(m map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			if k == "apiVersion" || k == "kind" {
				continue
			}
			if mv, ok := v.(map[string]any); ok && k == "metadata" {
				md := map[string]any{}
				for mk, mv := range mv {
					if mk != "name" && mk != "namespace" {
						md[mk] = mv
					}
				}
				if len(md) == 0 {
					continue
				}
				v = md
			}
			out[k] = v
		}
		return out
	}
	return reflect.DeepEqual(strip(want), strip(owned))
}

// applyServerObject applies desired, an object of PolicyServer ps in the controller's namespace,
// controlled by ps (garbage collection removes it with ps); the stored version is read from the
// cache. It returns the object as stored, and whether it wrote.
func applyServerObject[T client.Object](ctx context.Context, c client.Client, ps client.Object, desired T) (T, bool, error) {
	if err := controllerutil.SetControllerReference(ps, desired, c.Scheme()); err != nil {
		return desired, false, err
	}
	live := desired.DeepCopyObject().(T)
	var have client.Object = live
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), live); apierrors.IsNotFound(err) {
		have = nil
	} else if err != nil {
		return desired, false, err
	}
	wrote, err := applyOwned(ctx, c, desired, have)
	if err != nil || wrote || have == nil {
		return desired, wrote, err
	}
	return live, false, nil
}
