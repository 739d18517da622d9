package engine

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/match"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/mutators"
)

// ErrSettings wraps every error of Compile.
var ErrSettings = errors.New("invalid settings")

// ErrExternalData: a mutator uses externalData (refused).
var ErrExternalData = mutators.ErrExternalData

const group = "mutations.gatekeeper.sh"

type settingsError struct {
	msg   string
	inner error
}

func (e *settingsError) Error() string { return e.msg }
func (e *settingsError) Unwrap() []error {
	if e.inner != nil {
		return []error{ErrSettings, e.inner}
	}
	return []error{ErrSettings}
}

func settingsErr(msg string) error { return &settingsError{msg: ErrSettings.Error() + ": " + msg} }

// decoder walks one mutator object; the first error is kept.
type decoder struct {
	where string // "mutators[3] (Assign/foo)"
	err   error
}

func (d *decoder) fail(field, msg string) {
	if d.err == nil {
		d.err = settingsErr(d.where + ": " + field + ": " + msg)
	}
}

func (d *decoder) invalidType(field, want string, v *jsonv.Value) {
	d.fail(field, "Invalid value: \""+typeName(v)+"\": "+field+" in body must be of type "+want)
}

func typeName(v *jsonv.Value) string {
	switch v.K {
	case jsonv.Null:
		return "null"
	case jsonv.Bool:
		return "boolean"
	case jsonv.Int:
		return "integer"
	case jsonv.Float:
		return "number"
	case jsonv.String:
		return "string"
	case jsonv.Array:
		return "array"
	}
	return "object"
}

// obj returns the object at field of parent, nil when absent or null.
func (d *decoder) obj(parent *jsonv.Value, key, field string) *jsonv.Value {
	v := parent.Field(key)
	if v == nil || v.K == jsonv.Null {
		return nil
	}
	if v.K != jsonv.Object {
		d.invalidType(field, "object", v)
		return nil
	}
	return v
}

func (d *decoder) str(parent *jsonv.Value, key, field string) (string, bool) {
	v := parent.Field(key)
	if v == nil || v.K == jsonv.Null {
		return "", false
	}
	if v.K != jsonv.String {
		d.invalidType(field, "string", v)
		return "", false
	}
	return v.S, true
}

func (d *decoder) arr(parent *jsonv.Value, key, field string) ([]*jsonv.Value, bool) {
	v := parent.Field(key)
	if v == nil || v.K == jsonv.Null {
		return nil, false
	}
	if v.K != jsonv.Array {
		d.invalidType(field, "array", v)
		return nil, false
	}
	return v.A, true
}

func (d *decoder) strs(parent *jsonv.Value, key, field string) []string {
	a, _ := d.arr(parent, key, field)
	var out []string
	for i, e := range a {
		f := field + "[" + strconv.Itoa(i) + "]"
		if e.K != jsonv.String {
			d.invalidType(f, "string", e)
			return nil
		}
		out = append(out, e.S)
	}
	return out
}

func (d *decoder) enum(field, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	q := make([]string, len(allowed))
	for i, a := range allowed {
		q[i] = strconv.Quote(a)
	}
	d.fail(field, "Unsupported value: "+strconv.Quote(v)+": supported values: "+strings.Join(q, ", "))
}

// wildcardPattern is the CRD's ^\*?[-:a-z0-9]*\*?$ for namespaces and name.
func (d *decoder) wildcardPattern(field, v string) {
	s := strings.TrimPrefix(v, "*")
	s = strings.TrimSuffix(s, "*")
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c == ':' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			d.fail(field, "Invalid value: "+strconv.Quote(v)+": "+field+" in body should match '^\\*?[-:a-z0-9]*\\*?$'")
			return
		}
	}
}

func (d *decoder) selector(parent *jsonv.Value, key, field string) *match.LabelSelector {
	v := d.obj(parent, key, field)
	if v == nil {
		return nil
	}
	ls := &match.LabelSelector{}
	if ml := d.obj(v, "matchLabels", field+".matchLabels"); ml != nil {
		ls.MatchLabels = map[string]string{}
		for i, k := range ml.O.Keys {
			val := ml.O.Vals[i]
			if val.K != jsonv.String {
				d.invalidType(field+".matchLabels."+k, "string", val)
				return nil
			}
			ls.MatchLabels[k] = val.S
		}
	}
	exprs, _ := d.arr(v, "matchExpressions", field+".matchExpressions")
	for i, e := range exprs {
		f := field + ".matchExpressions[" + strconv.Itoa(i) + "]"
		if e.K != jsonv.Object {
			d.invalidType(f, "object", e)
			return nil
		}
		k, hasK := d.str(e, "key", f+".key")
		op, hasOp := d.str(e, "operator", f+".operator")
		if d.err == nil && !hasK {
			d.fail(f+".key", "Required value")
		}
		if d.err == nil && !hasOp {
			d.fail(f+".operator", "Required value")
		}
		ls.MatchExpressions = append(ls.MatchExpressions, match.Requirement{Key: k, Operator: op, Values: d.strs(e, "values", f+".values")})
	}
	return ls
}

func (d *decoder) match(spec *jsonv.Value) match.Match {
	var m match.Match
	v := d.obj(spec, "match", "spec.match")
	if v == nil {
		return m
	}
	if s, ok := d.str(v, "source", "spec.match.source"); ok {
		d.enum("spec.match.source", s, "All", "Generated", "Original")
		m.Source = s
	}
	kinds, _ := d.arr(v, "kinds", "spec.match.kinds")
	for i, k := range kinds {
		f := "spec.match.kinds[" + strconv.Itoa(i) + "]"
		if k.K != jsonv.Object {
			d.invalidType(f, "object", k)
			break
		}
		m.Kinds = append(m.Kinds, match.Kinds{APIGroups: d.strs(k, "apiGroups", f+".apiGroups"), Kinds: d.strs(k, "kinds", f+".kinds")})
	}
	m.Scope, _ = d.str(v, "scope", "spec.match.scope")
	m.Namespaces = d.strs(v, "namespaces", "spec.match.namespaces")
	for i, n := range m.Namespaces {
		d.wildcardPattern("spec.match.namespaces["+strconv.Itoa(i)+"]", n)
	}
	m.ExcludedNamespaces = d.strs(v, "excludedNamespaces", "spec.match.excludedNamespaces")
	for i, n := range m.ExcludedNamespaces {
		d.wildcardPattern("spec.match.excludedNamespaces["+strconv.Itoa(i)+"]", n)
	}
	m.LabelSelector = d.selector(v, "labelSelector", "spec.match.labelSelector")
	m.NamespaceSelector = d.selector(v, "namespaceSelector", "spec.match.namespaceSelector")
	if n, ok := d.str(v, "name", "spec.match.name"); ok {
		d.wildcardPattern("spec.match.name", n)
		m.Name = n
	}
	return m
}

func (d *decoder) applyTo(spec *jsonv.Value) ([]match.ApplyTo, bool) {
	a, ok := d.arr(spec, "applyTo", "spec.applyTo")
	var out []match.ApplyTo
	for i, e := range a {
		f := "spec.applyTo[" + strconv.Itoa(i) + "]"
		if e.K != jsonv.Object {
			d.invalidType(f, "object", e)
			return nil, ok
		}
		at := match.ApplyTo{
			Groups:     d.strs(e, "groups", f+".groups"),
			Versions:   d.strs(e, "versions", f+".versions"),
			Kinds:      d.strs(e, "kinds", f+".kinds"),
			Operations: d.strs(e, "operations", f+".operations"),
		}
		for j, op := range at.Operations {
			d.enum(f+".operations["+strconv.Itoa(j)+"]", op, "CREATE", "UPDATE", "*")
		}
		out = append(out, at)
	}
	return out, ok
}

func (d *decoder) pathTests(params *jsonv.Value) []mutators.PathTest {
	a, _ := d.arr(params, "pathTests", "spec.parameters.pathTests")
	var out []mutators.PathTest
	for i, e := range a {
		f := "spec.parameters.pathTests[" + strconv.Itoa(i) + "]"
		if e.K != jsonv.Object {
			d.invalidType(f, "object", e)
			return nil
		}
		sp, _ := d.str(e, "subPath", f+".subPath")
		c, hasC := d.str(e, "condition", f+".condition")
		if hasC {
			d.enum(f+".condition", c, "MustExist", "MustNotExist")
		}
		out = append(out, mutators.PathTest{SubPath: sp, Condition: c})
	}
	return out
}

func (d *decoder) assignField(params *jsonv.Value, s *mutators.Spec) {
	a := d.obj(params, "assign", "spec.parameters.assign")
	if a == nil {
		return
	}
	if v, ok := a.O.Get("value"); ok && v.K != jsonv.Null {
		s.HasValue = true
		s.Value = toFloats(v)
	}
	if fm := d.obj(a, "fromMetadata", "spec.parameters.assign.fromMetadata"); fm != nil {
		s.HasFromMetadata = true
		s.FromMetadata, _ = d.str(fm, "field", "spec.parameters.assign.fromMetadata.field")
	}
	if ed := d.obj(a, "externalData", "spec.parameters.assign.externalData"); ed != nil {
		s.HasExternalData = true
	}
}

// toFloats types every number as float64: Gatekeeper decodes assign.value
// with encoding/json into interface{}.
func toFloats(v *jsonv.Value) *jsonv.Value {
	switch v.K {
	case jsonv.Int:
		return jsonv.NewFloat(float64(v.I))
	case jsonv.Array:
		a := make([]*jsonv.Value, len(v.A))
		for i, e := range v.A {
			a[i] = toFloats(e)
		}
		return jsonv.NewArray(a)
	case jsonv.Object:
		o := jsonv.NewObject()
		for i, k := range v.O.Keys {
			o.O.Set(k, toFloats(v.O.Vals[i]))
		}
		return o
	}
	return v.DeepCopy()
}

// toClusterInts types numbers as a mutator read back from the apiserver
// holds them in an interface{} field: the apiserver re-encodes the object
// (an integral float64 is written as an integer) and Gatekeeper's client
// decodes integers as int64.
func toClusterInts(v *jsonv.Value) *jsonv.Value {
	switch v.K {
	case jsonv.Float:
		lit := jsonv.AppendFloat(nil, v.F)
		if i, err := strconv.ParseInt(string(lit), 10, 64); err == nil {
			return jsonv.NewInt(i)
		}
		return v.DeepCopy()
	case jsonv.Array:
		a := make([]*jsonv.Value, len(v.A))
		for i, e := range v.A {
			a[i] = toClusterInts(e)
		}
		return jsonv.NewArray(a)
	case jsonv.Object:
		o := jsonv.NewObject()
		for i, k := range v.O.Keys {
			o.O.Set(k, toClusterInts(v.O.Vals[i]))
		}
		return o
	}
	return v.DeepCopy()
}

var servedVersions = map[string][]string{
	mutators.KindAssign:         {"v1", "v1beta1", "v1alpha1"},
	mutators.KindAssignMetadata: {"v1", "v1beta1", "v1alpha1"},
	mutators.KindModifySet:      {"v1", "v1beta1", "v1alpha1"},
	mutators.KindAssignImage:    {"v1alpha1"},
}

// decodeMutator turns one mutator object into a Spec (the apiserver's
// checks: types, required fields, enums, patterns, defaults).
func decodeMutator(i int, v *jsonv.Value) (mutators.Spec, error) {
	d := &decoder{where: "mutators[" + strconv.Itoa(i) + "]"}
	var s mutators.Spec
	if v.K != jsonv.Object {
		return s, settingsErr(d.where + ": must be an object (a Gatekeeper mutator), got " + typeName(v))
	}
	kind, _ := d.str(v, "kind", "kind")
	apiVersion, _ := d.str(v, "apiVersion", "apiVersion")
	name := ""
	if md := d.obj(v, "metadata", "metadata"); md != nil {
		name, _ = d.str(md, "name", "metadata.name")
	}
	if kind != "" || name != "" {
		d.where += " (" + kind + "/" + name + ")"
	}
	if d.err != nil {
		return s, d.err
	}
	versions, known := servedVersions[kind]
	if !known {
		return s, settingsErr(d.where + ": kind: unknown mutator kind " + strconv.Quote(kind) + " (want Assign, AssignMetadata, ModifySet or AssignImage)")
	}
	g, ver, _ := strings.Cut(apiVersion, "/")
	if g != group {
		return s, settingsErr(d.where + ": apiVersion: " + strconv.Quote(apiVersion) + " is not in group " + group)
	}
	served := false
	for _, sv := range versions {
		served = served || sv == ver
	}
	if !served {
		return s, settingsErr(d.where + ": apiVersion: " + kind + " is not served in version " + strconv.Quote(ver) + " (served: " + group + "/" + strings.Join(versions, ", "+group+"/") + ")")
	}
	if name == "" {
		return s, settingsErr(d.where + ": metadata.name: Required value: name or generateName is required")
	}
	if !match.IsDNS1123Subdomain(name) {
		return s, settingsErr(d.where + ": metadata.name: Invalid value: " + strconv.Quote(name) + ": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
	}
	s.Kind, s.Name = kind, name
	spec := d.obj(v, "spec", "spec")
	if spec == nil {
		spec = jsonv.NewObject()
	}
	if kind != mutators.KindAssignMetadata {
		s.ApplyTo, s.HasApply = d.applyTo(spec)
	}
	s.Match = d.match(spec)
	s.Location, _ = d.str(spec, "location", "spec.location")
	params := d.obj(spec, "parameters", "spec.parameters")
	if params == nil {
		params = jsonv.NewObject()
	}
	switch kind {
	case mutators.KindAssign:
		s.PathTests = d.pathTests(params)
		d.assignField(params, &s)
	case mutators.KindAssignMetadata:
		d.assignField(params, &s)
	case mutators.KindModifySet:
		s.PathTests = d.pathTests(params)
		s.Operation = "merge"
		if op, ok := d.str(params, "operation", "spec.parameters.operation"); ok {
			d.enum("spec.parameters.operation", op, "merge", "prune")
			s.Operation = op
		}
		s.ValuesNil = true
		if vals := d.obj(params, "values", "spec.parameters.values"); vals != nil {
			if fl, ok := vals.O.Get("fromList"); ok && fl.K != jsonv.Null {
				if fl.K != jsonv.Array {
					d.fail("spec.parameters.values.fromList", "must be a list (Gatekeeper cannot decode a "+typeName(fl)+")")
				} else {
					s.ValuesNil = false
					s.Values = make([]*jsonv.Value, len(fl.A))
					for j, e := range fl.A {
						s.Values[j] = toClusterInts(e)
					}
				}
			}
		}
	case mutators.KindAssignImage:
		s.PathTests = d.pathTests(params)
		s.AssignDomain, _ = d.str(params, "assignDomain", "spec.parameters.assignDomain")
		s.AssignPath, _ = d.str(params, "assignPath", "spec.parameters.assignPath")
		s.AssignTag, _ = d.str(params, "assignTag", "spec.parameters.assignTag")
	}
	if d.err != nil {
		return s, d.err
	}
	return s, nil
}

func decodeNamespace(i int, v *jsonv.Value) (*match.Namespace, error) {
	d := &decoder{where: "namespaces[" + strconv.Itoa(i) + "]"}
	if v.K != jsonv.Object {
		return nil, settingsErr(d.where + ": must be a Namespace object, got " + typeName(v))
	}
	if k, ok := d.str(v, "kind", "kind"); ok && k != "Namespace" {
		d.fail("kind", "want Namespace, got "+strconv.Quote(k))
	}
	md := d.obj(v, "metadata", "metadata")
	ns := &match.Namespace{}
	if md != nil {
		ns.Name, _ = d.str(md, "name", "metadata.name")
		if l := d.obj(md, "labels", "metadata.labels"); l != nil {
			ns.Labels = map[string]string{}
			for j, k := range l.O.Keys {
				if l.O.Vals[j].K != jsonv.String {
					d.invalidType("metadata.labels."+k, "string", l.O.Vals[j])
					break
				}
				ns.Labels[k] = l.O.Vals[j].S
			}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if ns.Name == "" {
		return nil, settingsErr(d.where + ": metadata.name: Required value")
	}
	return ns, nil
}
