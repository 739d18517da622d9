package jsonengine

import (
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
)

// ApplyConfiguration: the apiserver's apply-configuration patcher
// (patch.ApplyStructuredMergeDiff) on unstructured content, with the
// structured-merge schema of the built-in types that client-go compiles in,
// serialized at build time into smd_schema.json (TestSMDSchemaUpToDate):
// [name, atom] per type, an atom {"s": scalar, "l": [elem, relationship,
// keys], "m": [elem, relationship, [[field, type, default?]...], unions?]}
// (a union [discriminator, deduceInvalidDiscriminator, [[field, value]...]]), a type
// reference a name or {"n": name, "i": atom, "r": relationship}.

//go:embed smd_schema.json
var smdSchemaJSON []byte

type smdSchema struct {
	schema *schema.Schema
	kinds  map[string]string // group/version/Kind -> type name
}

var builtinSMD struct {
	once sync.Once
	s    *smdSchema
	err  error
}

func builtinSchema() (*smdSchema, error) {
	builtinSMD.once.Do(func() {
		builtinSMD.s, builtinSMD.err = decodeSMDSchema(smdSchemaJSON)
	})
	return builtinSMD.s, builtinSMD.err
}

// decodeSMDSchema decodes smd_schema.json. It reads the document without
// reflection (decodeFastValue, numbers as float64 as encoding/json gives them
// in an any): with encoding/json, the first apply configuration of every new
// TinyGo instance spent a large part of its time here
// (TestSMDSchemaDecoding compares the two).
func decodeSMDSchema(b []byte) (*smdSchema, error) {
	doc, ok := decodeFastValue(b, true)
	if !ok {
		return nil, fmt.Errorf("smd_schema.json: not a JSON object")
	}
	return decodeSMDSchemaDoc(doc)
}

// decodeSMDSchemaDoc is decodeSMDSchema of the decoded document.
func decodeSMDSchemaDoc(doc any) (*smdSchema, error) {
	in := interner{} // the strings kept are copies: see interner
	top, _ := doc.(map[string]any)
	if top == nil {
		return nil, fmt.Errorf("smd_schema.json: not a JSON object")
	}
	kinds := map[string]string{}
	if km, ok := top["kinds"].(map[string]any); ok {
		for k, v := range km {
			name, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("smd_schema.json: kind %s: not a type name", k)
			}
			kinds[in.s(k)] = in.s(name)
		}
	}
	types, _ := top["types"].([]any)
	s := &schema.Schema{Types: make([]schema.TypeDef, len(types))}
	for i, tv := range types {
		var t [2]any // as encoding/json decodes a list into [2]any
		l, ok := tv.([]any)
		if !ok {
			return nil, fmt.Errorf("smd_schema.json: type %d: not a list", i)
		}
		copy(t[:], l)
		name, _ := t[0].(string)
		name = in.s(name)
		atom, err := decodeAtom(t[1], in)
		if err != nil {
			return nil, fmt.Errorf("smd_schema.json: type %s: %w", name, err)
		}
		s.Types[i] = schema.TypeDef{Name: name, Atom: atom}
	}
	return &smdSchema{schema: s, kinds: kinds}, nil
}

// interner gives each string the tables keep as a copy of its own, one per
// distinct text. internal/ujson decodes a string without escapes as a
// substring of one copy of the whole document; the embedded tables' strings
// (type and field names) live as long as the instance, and under TinyGo's
// collector every pointer into the middle of an object costs a walk back to
// the object's start at every collection: with the tables' strings pointing
// into their 250 KB and 150 KB documents, each collection of the TinyGo
// module took 60-120 ms instead of about 35 (measured, 2026-12-02). With the
// strings copied, the documents are garbage once decoded; copying the whole
// decoded document instead (cloneStrings) grew every instance's heap from 16
// to 32 MB at the first evaluation. TestTableStringsCopied.
type interner map[string]string

func (in interner) s(x string) string {
	if c, ok := in[x]; ok {
		return c
	}
	c := strings.Clone(x)
	in[c] = c
	return c
}

// cloneStrings gives v with every string and map key a copy of its own.
func cloneStrings(v any) any {
	switch x := v.(type) {
	case string:
		return strings.Clone(x)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[strings.Clone(k)] = cloneStrings(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = cloneStrings(e)
		}
		return x
	}
	return v
}

var errSchemaFormat = errors.New("malformed")

func decodeAtom(v any, in interner) (schema.Atom, error) {
	var a schema.Atom
	m, ok := v.(map[string]any)
	if !ok {
		return a, errSchemaFormat
	}
	if s, ok := m["s"].(string); ok {
		sc := schema.Scalar(in.s(s))
		a.Scalar = &sc
	}
	if l, ok := m["l"].([]any); ok && len(l) == 3 {
		elem, err := decodeRef(l[0], in)
		if err != nil {
			return a, err
		}
		rel, _ := l[1].(string)
		list := &schema.List{ElementType: elem, ElementRelationship: schema.ElementRelationship(in.s(rel))}
		if keys, ok := l[2].([]any); ok {
			for _, k := range keys {
				ks, _ := k.(string)
				list.Keys = append(list.Keys, in.s(ks))
			}
		}
		a.List = list
	}
	if mm, ok := m["m"].([]any); ok && len(mm) >= 3 {
		elem, err := decodeRef(mm[0], in)
		if err != nil {
			return a, err
		}
		rel, _ := mm[1].(string)
		mp := &schema.Map{ElementType: elem, ElementRelationship: schema.ElementRelationship(in.s(rel))}
		fields, _ := mm[2].([]any)
		for _, f := range fields {
			fl, ok := f.([]any)
			if !ok || len(fl) < 2 {
				return a, errSchemaFormat
			}
			name, _ := fl[0].(string)
			t, err := decodeRef(fl[1], in)
			if err != nil {
				return a, err
			}
			sf := schema.StructField{Name: in.s(name), Type: t}
			if len(fl) > 2 {
				sf.Default = cloneStrings(fl[2])
			}
			mp.Fields = append(mp.Fields, sf)
		}
		if len(mm) > 3 {
			unions, _ := mm[3].([]any)
			for _, u := range unions {
				ul, ok := u.([]any)
				if !ok || len(ul) != 3 {
					return a, errSchemaFormat
				}
				var un schema.Union
				if d, ok := ul[0].(string); ok {
					d = in.s(d)
					un.Discriminator = &d
				}
				un.DeduceInvalidDiscriminator, _ = ul[1].(bool)
				fs, _ := ul[2].([]any)
				for _, f := range fs {
					fl, ok := f.([]any)
					if !ok || len(fl) != 2 {
						return a, errSchemaFormat
					}
					var uf schema.UnionField
					uf.FieldName, _ = fl[0].(string)
					uf.DiscriminatorValue, _ = fl[1].(string)
					uf.FieldName, uf.DiscriminatorValue = in.s(uf.FieldName), in.s(uf.DiscriminatorValue)
					un.Fields = append(un.Fields, uf)
				}
				mp.Unions = append(mp.Unions, un)
			}
		}
		a.Map = mp
	}
	return a, nil
}

func decodeRef(v any, in interner) (schema.TypeRef, error) {
	var r schema.TypeRef
	switch x := v.(type) {
	case string:
		x = in.s(x)
		r.NamedType = &x
		return r, nil
	case map[string]any:
		if n, ok := x["n"].(string); ok {
			n = in.s(n)
			r.NamedType = &n
		}
		if i, ok := x["i"]; ok {
			atom, err := decodeAtom(i, in)
			if err != nil {
				return r, err
			}
			r.Inlined = atom
		}
		if rel, ok := x["r"].(string); ok {
			er := schema.ElementRelationship(in.s(rel))
			r.ElementRelationship = &er
		}
		return r, nil
	}
	return r, errSchemaFormat
}

// applyConfiguration merges the expression's Object into the object.
func applyConfiguration(val any, object map[string]any, kind *attrs) (map[string]any, error) {
	obj, ok := val.(*dynamic.ObjectVal)
	if !ok {
		return nil, fmt.Errorf("unsupported return type from ApplyConfiguration expression: %v", val)
	}
	if err := obj.CheckTypeNamesMatchFieldPathNames(); err != nil {
		return nil, fmt.Errorf("type mismatch: %w", err)
	}
	patch, ok := obj.Value().(map[string]any)
	if !ok {
		return nil, fmt.Errorf("invalid return type: %T", val)
	}
	apiVersion := kind.version
	if kind.group != "" {
		apiVersion = kind.group + "/" + kind.version
	}
	patch["apiVersion"], patch["kind"] = apiVersion, kind.kind
	out, err := applyStructuredMergeDiff(kind, object, patch)
	if err != nil {
		return nil, fmt.Errorf("error applying patch: %w", err)
	}
	// The dispatcher converts the result to the typed object; live is the
	// output of such a conversion, and the members of out the patch does
	// not reach are live's, so only those it reaches are converted again.
	if slowPaths {
		return roundTripObject(out, kind.group, kind.version, kind.kind, false)
	}
	return roundTripTouched(out, patch, kind.group, kind.version, kind.kind)
}

// slowPaths turns the fast paths off (mergeTouched, roundTripTouched,
// sameJSON): TestFastPathsAgainstSlow compares whole evaluations both ways.
var slowPaths = false

// applyStructuredMergeDiff is the apiserver's merge of the patch into live
// (typed.TypedValue.Merge after both are validated), computed on the parts
// of live the patch reaches (mergeTouched) when it can.
func applyStructuredMergeDiff(kind *attrs, live, patch map[string]any) (map[string]any, error) {
	return applySMD(kind, live, patch, !slowPaths)
}

// smdParse is an apply configuration's patch typed against the kind's schema.
type smdParse struct {
	parse typed.ParseableType
	typed *typed.TypedValue
}

// typePatch types and checks the patch as the apiserver's patcher does.
func typePatch(kind *attrs, patch map[string]any) (*smdParse, error) {
	parse, err := parseableType(kind, patch)
	if err != nil {
		return nil, err
	}
	patchTyped, err := parse.FromUnstructured(patch)
	if err != nil {
		return nil, fmt.Errorf("failed to convert patch object to typed object: %w", err)
	}
	if atomics := findAtomics(nil, patchTyped.Schema(), patchTyped.TypeRef(), patchTyped.AsValue()); len(atomics) > 0 {
		return nil, fmt.Errorf("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: %v", strings.Join(atomics, ", "))
	}
	return &smdParse{parse: parse, typed: patchTyped}, nil
}

func applySMD(kind *attrs, live, patch map[string]any, touchedOnly bool) (map[string]any, error) {
	p, err := typePatch(kind, patch)
	if err != nil {
		return nil, err
	}
	parse, patchTyped := p.parse, p.typed
	var liveTyped *typed.TypedValue
	if touchedOnly && validates(parse.Schema, parse.TypeRef, live, 0) {
		liveTyped = typed.AsTypedUnvalidated(value.NewValueInterface(live), parse.Schema, parse.TypeRef) //nolint:staticcheck // validates checked it
	} else if liveTyped, err = parse.FromUnstructured(live, typed.AllowDuplicates); err != nil {
		return nil, fmt.Errorf("failed to convert original object to typed object: %w", err)
	}
	if touchedOnly {
		if m, ok := mergeTouched(parse, live, patch, patchTyped); ok {
			return m, nil
		}
	}
	merged, err := liveTyped.Merge(patchTyped)
	if err != nil {
		return nil, fmt.Errorf("failed to merge patch: %w", err)
	}
	m, ok := merged.AsValue().Unstructured().(map[string]any)
	if !ok {
		return nil, fmt.Errorf("failed to convert typed object to object: not an object")
	}
	return m, nil
}

// parseableType is the type converter's type of the kind: the built-in
// schema's, or for other kinds the schema of a custom resource that
// declares exactly the patch's fields (every list atomic), built from the
// patch as package engine's schemaless converter does.
func parseableType(kind *attrs, patch map[string]any) (typed.ParseableType, error) {
	if _, isBuiltin := typedKind(kind.group, kind.version, kind.kind); isBuiltin {
		s, err := builtinSchema()
		if err != nil {
			return typed.ParseableType{}, err
		}
		name, ok := s.kinds[kind.group+"/"+kind.version+"/"+kind.kind]
		if !ok {
			return typed.ParseableType{}, fmt.Errorf("no schema for %s/%s, Kind=%s", kind.group, kind.version, kind.kind)
		}
		return typed.ParseableType{Schema: s.schema, TypeRef: schema.TypeRef{NamedType: &name}}, nil
	}
	s, root := schemalessSchema(patch)
	return typed.ParseableType{Schema: s, TypeRef: root}, nil
}

const (
	untypedGranular = "__tollgate_untyped_granular"
	untypedAtomic   = "__tollgate_untyped_atomic"
)

func schemalessSchema(content map[string]any) (*schema.Schema, schema.TypeRef) {
	untyped := schema.Scalar("untyped")
	s := &schema.Schema{Types: []schema.TypeDef{
		{Name: untypedAtomic, Atom: schema.Atom{
			Scalar: &untyped,
			List:   &schema.List{ElementType: namedRef(untypedAtomic), ElementRelationship: schema.Atomic},
			Map:    &schema.Map{ElementType: namedRef(untypedAtomic), ElementRelationship: schema.Atomic},
		}},
		{Name: untypedGranular, Atom: schema.Atom{
			Scalar: &untyped,
			List:   &schema.List{ElementType: namedRef(untypedAtomic), ElementRelationship: schema.Atomic},
			Map:    &schema.Map{ElementType: namedRef(untypedGranular), ElementRelationship: schema.Separable},
		}},
	}}
	n := 0
	var declare func(v any) schema.TypeRef
	declare = func(v any) schema.TypeRef {
		obj, ok := v.(map[string]any)
		if !ok {
			return namedRef(untypedGranular)
		}
		name := "__tollgate_object_" + strconv.Itoa(n)
		n++
		m := &schema.Map{ElementType: namedRef(untypedGranular), ElementRelationship: schema.Separable}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.Fields = append(m.Fields, schema.StructField{Name: k, Type: declare(obj[k])})
		}
		s.Types = append(s.Types, schema.TypeDef{Name: name, Atom: schema.Atom{Scalar: &untyped, Map: m,
			List: &schema.List{ElementType: namedRef(untypedAtomic), ElementRelationship: schema.Atomic}}})
		return namedRef(name)
	}
	root := declare(content)
	return s, root
}

func namedRef(n string) schema.TypeRef { return schema.TypeRef{NamedType: &n} }

// findAtomics lists the paths where the patch sets an atomic list, map or
// struct (the apiserver's validatePatch).
func findAtomics(path []fieldpath.PathElement, s *schema.Schema, tr schema.TypeRef, v value.Value) (atomics []string) {
	if a, ok := s.Resolve(tr); ok {
		if v.IsMap() && a.Map != nil {
			if a.Map.ElementRelationship == schema.Atomic {
				atomics = append(atomics, pathString(path))
			}
			v.AsMap().Iterate(func(key string, val value.Value) bool {
				pe := fieldpath.PathElement{FieldName: &key}
				if sf, ok := a.Map.FindField(key); ok {
					atomics = append(atomics, findAtomics(append(path, pe), s, sf.Type, val)...)
				}
				return true
			})
		}
		if v.IsList() && a.List != nil {
			if a.List.ElementRelationship == schema.Atomic {
				atomics = append(atomics, pathString(path))
			}
			list := v.AsList()
			for i := 0; i < list.Length(); i++ {
				pe := fieldpath.PathElement{Index: &i}
				atomics = append(atomics, findAtomics(append(path, pe), s, a.List.ElementType, list.At(i))...)
			}
		}
	}
	return atomics
}

func pathString(path []fieldpath.PathElement) string {
	var sb strings.Builder
	for _, p := range path {
		sb.WriteString(p.String())
	}
	return sb.String()
}

// mergeTouched is liveTyped.Merge(patchTyped) for a live object that
// validated, computed on the parts of live the patch reaches: the merge
// makes each member of a map (that is not atomic) from the two sides'
// members of that name alone, and a member only live has comes out as it went
// in (its scalars as they are, its maps and lists rebuilt with the same
// items, nulls and duplicates kept; with the live object validated, none of
// it can fail). So live is pruned to the members the patch names, descending
// where both sides hold a non-empty map of a map type that is not atomic,
// the pruned object is merged with the patch by structured-merge-diff, and
// the result is grafted onto live, whose other members it shares (nothing
// here changes a map in place). false when anything is not as expected: the
// caller merges the whole object then. TestMergeTouched compares the two on
// the test objects and generated patches.
func mergeTouched(parse typed.ParseableType, live, patch map[string]any, patchTyped *typed.TypedValue) (map[string]any, bool) {
	a, ok := parse.Schema.Resolve(parse.TypeRef)
	if !ok || a.Map == nil || a.Map.ElementRelationship == schema.Atomic || len(live) == 0 || len(patch) == 0 {
		return nil, false
	}
	pruned := pruneLive(parse.Schema, a.Map, live, patch)
	prunedTyped := typed.AsTypedUnvalidated(value.NewValueInterface(pruned), parse.Schema, parse.TypeRef) //nolint:staticcheck // live was validated whole
	merged, err := prunedTyped.Merge(patchTyped)
	if err != nil {
		return nil, false
	}
	m, ok := merged.AsValue().Unstructured().(map[string]any)
	if !ok {
		return nil, false
	}
	return graft(parse.Schema, a.Map, live, patch, m)
}

// descend gives the map type of a member holding the maps lv (live) and pv
// (patch) when mergeTouched descends into it: both non-empty maps, of a
// map type that is not atomic.
func descend(s *schema.Schema, t *schema.Map, key string, lv, pv any) (lm, pm map[string]any, mt *schema.Map, ok bool) {
	lm, _ = lv.(map[string]any)
	pm, _ = pv.(map[string]any)
	if len(lm) == 0 || len(pm) == 0 {
		return nil, nil, nil, false
	}
	tr := t.ElementType
	if sf, found := t.FindField(key); found {
		tr = sf.Type
	}
	a, found := s.Resolve(tr)
	if !found || a.Map == nil || a.Map.ElementRelationship == schema.Atomic {
		return nil, nil, nil, false
	}
	return lm, pm, a.Map, true
}

// pruneLive keeps the members of live that patch names.
func pruneLive(s *schema.Schema, t *schema.Map, live, patch map[string]any) map[string]any {
	out := make(map[string]any, len(patch))
	for k, pv := range patch {
		lv, ok := live[k]
		if !ok {
			continue
		}
		if lm, pm, mt, ok := descend(s, t, k, lv, pv); ok {
			out[k] = pruneLive(s, mt, lm, pm)
			continue
		}
		out[k] = lv
	}
	return out
}

// graft puts the merge of the pruned object (merged) onto live.
func graft(s *schema.Schema, t *schema.Map, live, patch, merged map[string]any) (map[string]any, bool) {
	for k := range patch {
		if _, inLive := live[k]; inLive {
			if _, ok := merged[k]; !ok {
				return nil, false // a member the merge dropped: not expected
			}
		}
	}
	out := make(map[string]any, len(live)+len(merged))
	for k, v := range live {
		out[k] = v
	}
	for k, mv := range merged {
		lm, pm, mt, ok := descend(s, t, k, live[k], patch[k])
		if !ok {
			out[k] = mv
			continue
		}
		mm, isMap := mv.(map[string]any)
		if !isMap {
			return nil, false
		}
		g, ok := graft(s, mt, lm, pm, mm)
		if !ok {
			return nil, false
		}
		out[k] = g
	}
	return out, true
}

// validates reports that structured-merge-diff's validation of v as tr
// (typed.AsTyped with AllowDuplicates, as the live object is validated)
// finds nothing, without its allocations: it follows the same steps (the
// schema's atom for v's kind of value, scalars' types, maps' declared
// fields, keyed lists' items with a key or a key's default, sets' items
// scalars) and says false on anything else, when the caller has
// structured-merge-diff validate v to have its errors. It never says true
// where that validation fails (TestValidatesAgainstSMD).
func validates(s *schema.Schema, tr schema.TypeRef, v any, depth int) bool {
	if depth > maxSameDepth {
		return false
	}
	a, ok := s.Resolve(tr)
	if !ok {
		return false
	}
	switch x := v.(type) {
	case nil:
		// deduceAtom keeps the whole atom for null; a null map, scalar or
		// list validates.
		return a.Map != nil || a.Scalar != nil || a.List != nil
	case int64, float64, string, bool:
		if a.Scalar == nil {
			return false // a map or list expected
		}
		switch *a.Scalar {
		case schema.Numeric:
			_, isInt := x.(int64)
			_, isFloat := x.(float64)
			return isInt || isFloat
		case schema.String:
			_, isString := x.(string)
			return isString
		case schema.Boolean:
			_, isBool := x.(bool)
			return isBool
		case schema.Untyped:
			return true
		}
		return false
	case map[string]any:
		if a.Map == nil {
			return false
		}
		for k, e := range x {
			t := a.Map.ElementType
			if sf, found := a.Map.FindField(k); found {
				t = sf.Type
			} else if (a.Map.ElementType == schema.TypeRef{}) {
				return false // field not declared in schema
			}
			if !validates(s, t, e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		if a.List == nil {
			return false
		}
		l := a.List
		for _, e := range x {
			if l.ElementRelationship == schema.Associative && !validItemKey(s, l, e) {
				return false
			}
			if !validates(s, l.ElementType, e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// validItemKey: structured-merge-diff makes the path element of item e of
// associative list l without an error (listItemToPathElement).
func validItemKey(s *schema.Schema, l *schema.List, e any) bool {
	if len(l.Keys) == 0 {
		switch e.(type) {
		case int64, float64, string, bool:
			return true
		}
		return false // a map, a list, null: refused in a set
	}
	m, isMap := e.(map[string]any)
	if !isMap {
		return false
	}
	n := 0
	for _, k := range l.Keys {
		if _, found := m[k]; found {
			n++
			continue
		}
		// An absent key field takes its default, which an item type
		// that is not a map cannot have (an error).
		a, ok := s.Resolve(l.ElementType)
		if !ok || a.Map == nil {
			return false
		}
		if f, found := a.Map.FindField(k); found && f.Default != nil {
			n++
		}
	}
	return n > 0
}
