package mutators

import (
	"errors"
	"strconv"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/tester"
)

// ErrNonKeyedSetter: the mutator does not set keyed list elements.
var ErrNonKeyedSetter = errors.New("mutator does not understand keyed lists")

// Setter writes a mutator's value at the last segment of its location.
type Setter interface {
	SetValue(obj *jsonv.Obj, key string) error
	KeyedListOkay() bool
	KeyedListValue() (*jsonv.Value, error)
}

// goNode formats a node as Gatekeeper's %+v of *parser.Object / *parser.List.
func goNode(n parser.Node) string {
	if n.Type == parser.ObjectNode {
		return "&{Reference:" + n.Reference + "}"
	}
	kv := "<nil>"
	if n.IntKey {
		kv = strconv.FormatInt(n.KeyInt, 10)
	} else if !n.Glob {
		kv = n.KeyString
	}
	return "&{KeyField:" + n.KeyField + " KeyValue:" + kv + " Glob:" + strconv.FormatBool(n.Glob) + "}"
}

func keyValue(n parser.Node) *jsonv.Value {
	if n.IntKey {
		return jsonv.NewInt(n.KeyInt)
	}
	return jsonv.NewString(n.KeyString)
}

// keyEquals is Go's interface equality between a path key (string or int64)
// and an element's value.
func keyEquals(n parser.Node, v *jsonv.Value) bool {
	if v == nil {
		return false
	}
	if n.IntKey {
		return v.K == jsonv.Int && v.I == n.KeyInt
	}
	return v.K == jsonv.String && v.S == n.KeyString
}

type walk struct {
	path   parser.Path
	tester *tester.Tester
	setter Setter
	// changed records a write that changed a value: a key or an element
	// added, or a value replaced by one that is not Equal to it. The
	// writes are the setter's at the last node, the elements setListElement
	// replaces or appends, and the keys and elements createMissing adds;
	// the others put back the object or a shallow copy of the array they
	// walked into.
	changed bool
	// semantic records a changing write whose value differs from the one
	// it replaced as a JSON value too (jsonv.SameJSON: numbers as float64,
	// a nil array as null), or that added a key or an element.
	semantic bool
}

// change records a write that changed a value; same says whether the new
// value is still the same JSON value as the old one.
func (w *walk) change(same bool) {
	w.changed = true
	w.semantic = w.semantic || !same
}

// Mutate walks path in obj (an object) and sets the value with setter; it
// reports whether anything was set (Gatekeeper's answer) and whether obj
// changed as a value (jsonv.Equal) on the way: changed is false only when
// every write left the value it wrote over as it was. Shapes that do not
// fit are errors.
//
// semantic is set when a changing write also changed the value as JSON
// (jsonv.SameJSON), or added a key or an element: the writes of one
// Mutate never undo each other (each is at another key or element), so
// when semantic is false the object is still the same JSON value.
func Mutate(path parser.Path, t *tester.Tester, setter Setter, obj *jsonv.Value) (mutated, changed, semantic bool, err error) {
	if len(path.Nodes) == 0 {
		return false, false, false, errors.New("attempting to mutate an empty target location")
	}
	w := &walk{path: path, tester: t, setter: setter}
	mutated, _, err = w.mutate(obj, 0)
	return mutated, w.changed, w.semantic, err
}

func (w *walk) mutate(current *jsonv.Value, depth int) (bool, *jsonv.Value, error) {
	entry := w.path.Nodes[depth]
	last := len(w.path.Nodes)-1 == depth
	if entry.Type == parser.ObjectNode {
		if current == nil || current.K != jsonv.Object {
			return false, nil, errors.New("mismatch between path entry (type: object) and received object (type: " +
				current.TypeName() + "). Path: " + goNode(entry))
		}
		next, exists := current.O.Get(entry.Reference)
		if exists {
			if !w.tester.ExistsOkay(depth) {
				return false, nil, nil
			}
		} else if !w.tester.MissingOkay(depth) {
			return false, nil, nil
		}
		if last {
			if err := w.setter.SetValue(current.O, entry.Reference); err != nil {
				return false, nil, err
			}
			if now, ok := current.O.Get(entry.Reference); ok != exists || !jsonv.Equal(now, next) {
				w.change(ok == exists && jsonv.SameJSON(now, next))
			}
			return true, current, nil
		}
		if !exists {
			var err error
			if next, err = w.createMissing(depth); err != nil {
				return false, nil, err
			}
		}
		mutated, next, err := w.mutate(next, depth+1)
		if err != nil {
			return false, nil, err
		}
		if mutated {
			if !exists {
				w.change(false)
			}
			current.O.Set(entry.Reference, next)
		}
		return mutated, current, nil
	}
	// List node.
	if current == nil || current.K != jsonv.Array {
		return false, nil, errors.New("mismatch between path entry (type: List) and received object (type: " +
			current.TypeName() + "). Path: " + goNode(entry))
	}
	shallow := make([]*jsonv.Value, len(current.A), len(current.A)+1)
	copy(shallow, current.A)
	if last {
		if !w.setter.KeyedListOkay() {
			return false, nil, ErrNonKeyedSetter
		}
		return w.setListElement(shallow, entry, depth)
	}
	if entry.Glob && !w.tester.ExistsOkay(depth) {
		return false, nil, nil
	}
	mutated, found := false, false
	for _, el := range shallow {
		if entry.Glob {
			m, _, err := w.mutate(el, depth+1)
			if err != nil {
				return false, nil, err
			}
			mutated = mutated || m
			found = true
		} else if el != nil && el.K == jsonv.Object {
			if ev, ok := el.O.Get(entry.KeyField); ok && keyEquals(entry, ev) {
				if !w.tester.ExistsOkay(depth) {
					return false, nil, nil
				}
				m, _, err := w.mutate(el, depth+1)
				if err != nil {
					return false, nil, err
				}
				mutated = mutated || m
				found = true
			}
		}
	}
	if !entry.Glob && !found {
		if !w.tester.MissingOkay(depth) {
			return false, nil, nil
		}
		next, err := w.createMissing(depth)
		if err != nil {
			return false, nil, err
		}
		shallow = append(shallow, next)
		m, _, err := w.mutate(next, depth+1)
		if err != nil {
			return false, nil, err
		}
		if m {
			w.change(false) // the element is added when the array is put back
		}
		mutated = mutated || m
	}
	return mutated, &jsonv.Value{K: jsonv.Array, A: shallow}, nil
}

func (w *walk) setListElement(list []*jsonv.Value, entry parser.Node, depth int) (bool, *jsonv.Value, error) {
	if entry.Glob {
		return false, nil, errors.New("last path entry can not be globbed")
	}
	newValue, err := w.setter.KeyedListValue()
	if err != nil {
		return false, nil, err
	}
	for i, el := range list {
		if el == nil || el.K != jsonv.Object {
			return false, nil, errors.New("cast error, unable to case " + el.TypeName() + " to map[string]interface{}")
		}
		ev, found := el.O.Get(entry.KeyField)
		if found && keyEquals(entry, ev) {
			nk, ok := newValue.O.Get(entry.KeyField)
			if !ok || !keyEquals(entry, nk) {
				return false, nil, errors.New("key value of replaced object must not change")
			}
			if !w.tester.ExistsOkay(depth) {
				return false, nil, nil
			}
			if !jsonv.Equal(list[i], newValue) {
				w.change(jsonv.SameJSON(list[i], newValue))
			}
			list[i] = newValue
			return true, &jsonv.Value{K: jsonv.Array, A: list}, nil
		}
	}
	if !w.tester.MissingOkay(depth) {
		return false, nil, nil
	}
	w.change(false)
	return true, &jsonv.Value{K: jsonv.Array, A: append(list, newValue)}, nil
}

func (w *walk) createMissing(depth int) (*jsonv.Value, error) {
	entry, nextEntry := w.path.Nodes[depth], w.path.Nodes[depth+1]
	var next *jsonv.Value
	if nextEntry.Type == parser.ObjectNode {
		next = jsonv.NewObject()
	} else {
		next = &jsonv.Value{K: jsonv.Array, A: []*jsonv.Value{}}
	}
	if entry.Type == parser.ListNode {
		if next.K != jsonv.Object {
			return nil, errors.New("two consecutive list path entries not allowed: " + goNode(entry) + " " + goNode(nextEntry))
		}
		if entry.Glob {
			return nil, errors.New("list entry has no key value")
		}
		next.O.Set(entry.KeyField, keyValue(entry))
	}
	return next, nil
}
