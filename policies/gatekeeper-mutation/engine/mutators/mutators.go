package mutators

import (
	"errors"
	"strconv"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/match"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/tester"
)

// Kinds of mutators, in Gatekeeper's ID order.
const (
	KindAssign         = "Assign"
	KindAssignImage    = "AssignImage"
	KindAssignMetadata = "AssignMetadata"
	KindModifySet      = "ModifySet"
)

// Terminal types for schema conflicts.
const (
	TerminalUnknown = "Unknown"
	TerminalSet     = "Set"
	TerminalString  = "String"
)

// ErrNameLength: Gatekeeper refuses names longer than 63 characters.
var ErrNameLength = errors.New("maximum name length is 63 characters")

// PathTest is a pathTests entry as written.
type PathTest struct {
	SubPath   string
	Condition string
}

// Spec is a decoded mutator: the union of the four kinds' fields.
type Spec struct {
	Kind      string
	Name      string
	ApplyTo   []match.ApplyTo
	HasApply  bool
	Match     match.Match
	Location  string
	PathTests []PathTest

	// Assign, AssignMetadata: exactly one of Value (HasValue), FromMetadata
	// (HasFromMetadata) or external data (HasExternalData).
	Value           *jsonv.Value
	HasValue        bool
	FromMetadata    string
	HasFromMetadata bool
	HasExternalData bool

	// ModifySet.
	Operation string
	Values    []*jsonv.Value
	ValuesNil bool

	// AssignImage.
	AssignDomain, AssignPath, AssignTag string
}

// Binding is one GVK and operation a mutator implies a schema for.
type Binding struct {
	GVK       match.GVK
	Operation string
}

// Mutator is a validated mutator.
type Mutator struct {
	Spec
	Path     parser.Path
	Tester   *tester.Tester
	Bindings []Binding
}

// ID is "Kind/name".
func (m *Mutator) ID() string { return m.Kind + "/" + m.Name }

// GKID formats the ID as Gatekeeper's types.ID does.
func (m *Mutator) GKID() string { return m.Kind + ".mutations.gatekeeper.sh /" + m.Name }

// HasSchema: AssignMetadata takes no part in schema conflicts.
func (m *Mutator) HasSchema() bool { return m.Kind != KindAssignMetadata }

// TerminalType of the location's last element for schema conflicts.
func (m *Mutator) TerminalType() string {
	switch m.Kind {
	case KindModifySet:
		return TerminalSet
	case KindAssignImage:
		return TerminalString
	}
	return TerminalUnknown
}

// ChangesMatchedFields reports whether the mutator's location may reach
// what matching reads of an object (apiVersion, kind, metadata): the
// system loop reads those again after a mutation that changed the object
// only when it may have.
func (m *Mutator) ChangesMatchedFields() bool {
	if len(m.Path.Nodes) == 0 || m.Path.Nodes[0].Type != parser.ObjectNode {
		return true
	}
	switch m.Path.Nodes[0].Reference {
	case "apiVersion", "kind", "metadata":
		return true
	}
	return false
}

// MustTerminate: AssignImage's string must be the end of the path.
func (m *Mutator) MustTerminate() bool { return m.Kind == KindAssignImage }

type wrapped struct {
	msg   string
	inner error
}

func (e wrapped) Error() string { return e.msg }
func (e wrapped) Unwrap() error { return e.inner }

func wrapf(err error, msg string) error { return wrapped{msg: msg + ": " + err.Error(), inner: err} }

func hasMetadataRoot(p parser.Path) bool {
	return len(p.Nodes) > 0 && p.Nodes[0] == parser.Node{Type: parser.ObjectNode, Reference: "metadata"}
}

func checkKeyNotChanged(p parser.Path) error {
	if len(p.Nodes) == 0 {
		return errors.New("empty path")
	}
	if len(p.Nodes) < 2 {
		return nil
	}
	last, second := p.Nodes[len(p.Nodes)-1], p.Nodes[len(p.Nodes)-2]
	if second.Type != parser.ListNode {
		return nil
	}
	if last.Type != parser.ObjectNode {
		return errors.New("invalid path format: child of a list can't be a list")
	}
	if last.Reference == second.KeyField {
		return errors.New("invalid path format: changing the item key is not allowed")
	}
	return nil
}

func newTester(name, kind string, p parser.Path, pts []PathTest) (*tester.Tester, error) {
	var tests []tester.Test
	for _, pt := range pts {
		sp, err := parser.Parse(pt.SubPath)
		if err != nil {
			return nil, wrapf(err, "problem parsing sub path `"+pt.SubPath+"` for "+kind+" "+name)
		}
		tests = append(tests, tester.Test{SubPath: sp, Condition: tester.Condition(pt.Condition)})
	}
	return tester.New(p, tests)
}

func operationRank(op string) int {
	switch op {
	case "CREATE":
		return 0
	case "UPDATE":
		return 1
	}
	return 4
}

func newBindings(name, kind string, applies []match.ApplyTo) ([]Binding, error) {
	for _, a := range applies {
		if len(a.Groups) == 0 || len(a.Versions) == 0 || len(a.Kinds) == 0 {
			return nil, errors.New("invalid applyTo for " + kind + " mutator " + name + ", all of group, version and kind must be specified")
		}
	}
	if err := match.ValidateOperations(applies); err != nil {
		return nil, errors.New("invalid applyTo for " + kind + " mutator " + name + ": " + err.Error())
	}
	if len(applies) == 0 {
		return nil, errors.New("applyTo required for " + kind + " mutator " + name)
	}
	seen := map[Binding]bool{}
	var out []Binding
	for i := range applies {
		for _, g := range applies[i].Flatten() {
			for _, op := range applies[i].EffectiveOperations() {
				b := Binding{GVK: g, Operation: op}
				if !seen[b] {
					seen[b] = true
					out = append(out, b)
				}
			}
		}
	}
	// Sorted by GVK string then operation, like Gatekeeper (order is not
	// significant for conflicts).
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && bindingLess(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

func bindingLess(a, b Binding) bool {
	as, bs := a.GVK.String(), b.GVK.String()
	if as != bs {
		return as < bs
	}
	return operationRank(a.Operation) < operationRank(b.Operation)
}

// validateAssignField mirrors AssignField.Validate.
func (s *Spec) validateAssignField() error {
	n := 0
	for _, b := range []bool{s.HasValue, s.HasFromMetadata, s.HasExternalData} {
		if b {
			n++
		}
	}
	if n == 0 {
		return errors.New("assign must set one of `externalData`, `value` or `fromMetadata`: invalid assign field")
	}
	if n > 1 {
		return errors.New("assign must only set one of `externalData`, `value` or `fromMetadata`: invalid assign field")
	}
	if s.HasFromMetadata && s.FromMetadata != "namespace" && s.FromMetadata != "name" {
		return errors.New("field " + s.FromMetadata + " is not recognized: invalid fromMetadata field")
	}
	return nil
}

// ErrExternalData: external data needs calls out of the sandbox.
var ErrExternalData = errors.New("externalData is not supported by tollgate's gatekeeper-mutation policy (it needs calls to external data providers from inside the Wasm sandbox)")

// FieldError is a constructor's refusal with the spec field it is about
// (Gatekeeper's messages do not always say).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func inField(field string, err error) error { return &FieldError{Field: field, Err: err} }

// New validates s as Gatekeeper's constructor for its kind does.
func New(s Spec) (*Mutator, error) {
	if len(s.Name) > 63 {
		return nil, inField("metadata.name", ErrNameLength)
	}
	switch s.Kind {
	case KindAssign:
		return newAssign(s)
	case KindAssignMetadata:
		return newAssignMetadata(s)
	case KindModifySet:
		return newModifySet(s)
	case KindAssignImage:
		return newAssignImage(s)
	}
	return nil, errors.New("unknown mutator kind " + strconv.Quote(s.Kind))
}

func newAssign(s Spec) (*Mutator, error) {
	p, err := parser.Parse(s.Location)
	if err != nil {
		return nil, inField("spec.location", wrapf(err, "invalid location format `"+s.Location+"` for Assign "+s.Name))
	}
	if hasMetadataRoot(p) {
		return nil, inField("spec.location", errors.New("assign "+s.Name+" can't change metadata"))
	}
	if err := checkKeyNotChanged(p); err != nil {
		return nil, inField("spec.location", err)
	}
	if err := s.validateAssignField(); err != nil {
		return nil, inField("spec.parameters.assign", err)
	}
	if s.HasExternalData {
		return nil, inField("spec.parameters.assign.externalData", ErrExternalData)
	}
	last := p.Nodes[len(p.Nodes)-1]
	if s.HasValue && last.Type == parser.ListNode {
		if last.Glob {
			return nil, inField("spec.location", errors.New("can't append to a globbed list"))
		}
		if s.Value == nil || s.Value.K != jsonv.Object {
			return nil, inField("spec.parameters.assign.value", errors.New("invalid value: `"+goValue(s.Value)+"`, only objects can be added to keyed lists"))
		}
		kv, _ := s.Value.O.Get(last.KeyField)
		if !keyEquals(last, kv) {
			return nil, inField("spec.parameters.assign.value", errors.New("adding object to list with different key "+last.KeyField+": list key "+
				keyString(last)+", object key "+goValue(kv)))
		}
	}
	if last.Type == parser.ListNode && s.HasFromMetadata {
		return nil, inField("spec.parameters.assign.fromMetadata", errors.New("cannot assign a metadata field to a list"))
	}
	t, err := newTester(s.Name, KindAssign, p, s.PathTests)
	if err != nil {
		return nil, inField("spec.parameters.pathTests", err)
	}
	b, err := newBindings(s.Name, KindAssign, s.ApplyTo)
	if err != nil {
		return nil, inField("spec.applyTo", err)
	}
	return &Mutator{Spec: s, Path: p, Tester: t, Bindings: b}, nil
}

func keyString(n parser.Node) string {
	if n.IntKey {
		return strconv.FormatInt(n.KeyInt, 10)
	}
	return n.KeyString
}

// goValue formats a JSON value roughly as Go's %v of the decoded value.
func goValue(v *jsonv.Value) string {
	if v == nil || v.K == jsonv.Null {
		return "<nil>"
	}
	switch v.K {
	case jsonv.String:
		return v.S
	case jsonv.Int:
		return strconv.FormatInt(v.I, 10)
	case jsonv.Float:
		return strconv.FormatFloat(v.F, 'g', -1, 64)
	case jsonv.Bool:
		return strconv.FormatBool(v.B)
	}
	return string(jsonv.Encode(nil, v))
}

func isValidMetadataPath(p parser.Path) bool {
	if len(p.Nodes) != 3 {
		return false
	}
	for _, n := range p.Nodes {
		if n.Type != parser.ObjectNode {
			return false
		}
	}
	return p.Nodes[0].Reference == "metadata" && (p.Nodes[1].Reference == "labels" || p.Nodes[1].Reference == "annotations")
}

func newAssignMetadata(s Spec) (*Mutator, error) {
	p, err := parser.Parse(s.Location)
	if err != nil {
		return nil, inField("spec.location", wrapf(err, "invalid location format for AssignMetadata "+s.Name+": "+s.Location))
	}
	if !isValidMetadataPath(p) {
		return nil, inField("spec.location", errors.New("invalid location for assignmetadata "+s.Name+": "+s.Location))
	}
	if err := s.validateAssignField(); err != nil {
		return nil, inField("spec.parameters.assign", err)
	}
	if s.HasExternalData {
		return nil, inField("spec.parameters.assign.externalData", ErrExternalData)
	}
	if s.HasValue && (s.Value == nil || s.Value.K != jsonv.String) {
		return nil, inField("spec.parameters.assign.value", errors.New("spec.parameters.assign.value field must be a string for AssignMetadata "+strconv.Quote(s.Name)))
	}
	t, err := tester.New(p, []tester.Test{{SubPath: p, Condition: tester.MustNotExist}})
	if err != nil {
		return nil, err
	}
	return &Mutator{Spec: s, Path: p, Tester: t}, nil
}

func newModifySet(s Spec) (*Mutator, error) {
	p, err := parser.Parse(s.Location)
	if err != nil {
		return nil, inField("spec.location", wrapf(err, "invalid location format `"+s.Location+"` for ModifySet "+s.Name))
	}
	if hasMetadataRoot(p) {
		return nil, inField("spec.location", errors.New("modifyset "+s.Name+" can't change metadata"))
	}
	if len(p.Nodes) > 0 && p.Nodes[len(p.Nodes)-1].Type == parser.ListNode {
		return nil, inField("spec.location", errors.New("final node in a modifyset location cannot be a keyed list"))
	}
	t, err := newTester(s.Name, KindModifySet, p, s.PathTests)
	if err != nil {
		return nil, inField("spec.parameters.pathTests", err)
	}
	b, err := newBindings(s.Name, KindModifySet, s.ApplyTo)
	if err != nil {
		return nil, inField("spec.applyTo", err)
	}
	return &Mutator{Spec: s, Path: p, Tester: t, Bindings: b}, nil
}

func newAssignImage(s Spec) (*Mutator, error) {
	p, err := parser.Parse(s.Location)
	if err != nil {
		return nil, inField("spec.location", wrapf(err, "invalid location format `"+s.Location+"` for assignImage "+s.Name))
	}
	if hasMetadataRoot(p) {
		return nil, inField("spec.location", errors.New("assignImage "+s.Name+" can't change metadata"))
	}
	if len(p.Nodes) > 0 && p.Nodes[len(p.Nodes)-1].Type == parser.ListNode {
		return nil, inField("spec.location", errors.New("assignImage "+s.Name+" cannot mutate list-type fields"))
	}
	if err := checkKeyNotChanged(p); err != nil {
		return nil, inField("spec.location", err)
	}
	if err := validateImageParts(s.AssignDomain, s.AssignPath, s.AssignTag); err != nil {
		return nil, inField("spec.parameters", errors.New("assignImage "+s.Name+" has invalid parameters: "+err.Error()))
	}
	t, err := newTester(s.Name, KindAssignImage, p, s.PathTests)
	if err != nil {
		return nil, inField("spec.parameters.pathTests", err)
	}
	b, err := newBindings(s.Name, KindAssignImage, s.ApplyTo)
	if err != nil {
		return nil, inField("spec.applyTo", err)
	}
	return &Mutator{Spec: s, Path: p, Tester: t, Bindings: b}, nil
}

// Mutable is the object being mutated with what the setters read of it.
type Mutable struct {
	Object    *jsonv.Value
	Namespace string // metadata.namespace as Gatekeeper's GetNamespace reads it
	Name      string
	// Changed is set by Mutate when the mutation changed Object as a value
	// (see the package function Mutate); it is never cleared.
	Changed bool
	// Semantic is set when the mutation changed Object as a JSON value
	// (jsonv.SameJSON; see the package function Mutate); never cleared.
	Semantic bool
}

// Mutate applies the mutator to obj (which must be an object).
func (m *Mutator) Mutate(mu *Mutable) (bool, error) {
	var s Setter
	switch m.Kind {
	case KindAssign, KindAssignMetadata:
		var v *jsonv.Value
		switch {
		case m.HasFromMetadata:
			if m.FromMetadata == "namespace" {
				v = jsonv.NewString(mu.Namespace)
			} else {
				v = jsonv.NewString(mu.Name)
			}
		default:
			v = copyValue(m.Value)
		}
		s = defaultSetter{value: v}
	case KindModifySet:
		vals := make([]*jsonv.Value, len(m.Values))
		for i, v := range m.Values {
			vals[i] = copyValue(v)
		}
		if m.ValuesNil {
			vals = nil
		}
		s = setSetter{prune: m.Operation == "prune", values: vals}
	case KindAssignImage:
		s = imageSetter{domain: m.AssignDomain, path: m.AssignPath, tag: m.AssignTag}
	}
	mutated, changed, semantic, err := Mutate(m.Path, m.Tester, s, mu.Object)
	mu.Changed = mu.Changed || changed
	mu.Semantic = mu.Semantic || semantic
	return mutated, err
}

// copyValue is a copy of a mutator's value for one mutation: a deep copy
// of an object or an array (the object's writes change those in place),
// the value itself for anything else (nothing changes a string, number,
// bool or null Value in place: writes replace them).
func copyValue(v *jsonv.Value) *jsonv.Value {
	if v != nil && (v.K == jsonv.Object || v.K == jsonv.Array) {
		return v.DeepCopy()
	}
	return v
}

type defaultSetter struct{ value *jsonv.Value }

func (s defaultSetter) KeyedListOkay() bool { return true }
func (s defaultSetter) KeyedListValue() (*jsonv.Value, error) {
	if s.value == nil || s.value.K != jsonv.Object {
		return nil, errors.New("assign.value for keyed list is not an object: " + goValue(s.value))
	}
	return s.value, nil
}
func (s defaultSetter) SetValue(obj *jsonv.Obj, key string) error {
	obj.Set(key, s.value)
	return nil
}

type setSetter struct {
	prune  bool
	values []*jsonv.Value
}

func (s setSetter) KeyedListOkay() bool                   { return false }
func (s setSetter) KeyedListValue() (*jsonv.Value, error) { return nil, ErrNonKeyedSetter }
func (s setSetter) SetValue(obj *jsonv.Obj, key string) error {
	val, ok := obj.Get(key)
	if !ok {
		if !s.prune {
			if s.values == nil {
				obj.Set(key, &jsonv.Value{K: jsonv.Array, NilArray: true})
			} else {
				c := make([]*jsonv.Value, len(s.values))
				for i, v := range s.values {
					c[i] = copyValue(v)
				}
				obj.Set(key, jsonv.NewArray(c))
			}
		}
		return nil
	}
	if val == nil || val.K != jsonv.Array {
		return errors.New(goValue(val) + " is not a list of values, cannot treat it as a set")
	}
	if !s.prune {
		vals := val.A
	outer:
		for _, v := range s.values {
			for _, e := range vals {
				if jsonv.Equal(v, e) {
					continue outer
				}
			}
			vals = append(vals, v)
		}
		if vals == nil {
			obj.Set(key, val)
		} else {
			obj.Set(key, &jsonv.Value{K: jsonv.Array, A: vals})
		}
		return nil
	}
	filtered := make([]*jsonv.Value, 0, len(val.A))
	for _, e := range val.A {
		matched := false
		for _, v := range s.values {
			if jsonv.Equal(v, e) {
				matched = true
			}
		}
		if !matched {
			filtered = append(filtered, e)
		}
	}
	obj.Set(key, jsonv.NewArray(filtered))
	return nil
}

type imageSetter struct{ domain, path, tag string }

func (s imageSetter) KeyedListOkay() bool                   { return false }
func (s imageSetter) KeyedListValue() (*jsonv.Value, error) { return nil, ErrNonKeyedSetter }
func (s imageSetter) SetValue(obj *jsonv.Obj, key string) error {
	str := ""
	if v, ok := obj.Get(key); ok {
		if v == nil || v.K != jsonv.String {
			return errors.New("expected value at AssignImage location to be a string, got " + goValue(v) + " of type " + v.TypeName())
		}
		str = v.S
	}
	obj.Set(key, jsonv.NewString(mutateImage(s.domain, s.path, s.tag, str)))
	return nil
}
