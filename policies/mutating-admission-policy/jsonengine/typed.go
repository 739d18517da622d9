package jsonengine

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// What typed objects do implicitly. The apiserver decodes a built-in
// object into its Go type (k8s.io/api) before the policy sees it, and
// encodes it again for CEL (runtime.DefaultUnstructuredConverter) and for
// JSON patches: unknown fields are dropped (rejected when a JSON patch's
// result is decoded, strictly), absent fields take their zero value, which
// is written back unless the field is omitempty (status: {}, resources: {})
// or omitzero and zero (creationTimestamp), empty omitempty fields disappear
// (labels: {}), quantities and times are written in their canonical form,
// numbers must fit the field's Go type, and a value of the wrong type is
// refused with encoding/json's message (the Go struct and type named). roundTrip does
// the same on unstructured content from typed_kinds.json, the description
// of client-go v0.36.6's Go types that TestTypedTableUpToDate generates.

//go:embed typed_kinds.json
var typedKindsJSON []byte

type typeNode struct {
	kind   string // s, p, l, m, string, bool, int, uint, float, bytes, time, microtime, quantity, intorstr, duration, raw
	elem   int
	fields []typeField
	// Of a struct, computed once when the table is loaded (finishTypedTable):
	// its fields with the inline ones flattened, their names, and its Go
	// type's name without the package.
	flat  []typeField
	names map[string]bool
	short string
	// repeated: two of flat's fields have the same name (roundTripMembers
	// converts such a struct by roundTrip).
	repeated bool
	// index: flat's index of each field name; absentKept (computed when
	// the table is loaded, loadTyped): the fields whose zero value a round
	// trip writes when they are absent (not omitted).
	index      map[string]int
	absentKept []int
}

type typeField struct {
	name      string
	typ       int
	omitempty bool
	omitzero  bool
	inline    bool
}

var typedTable struct {
	once    sync.Once
	err     error
	kinds   map[string]int
	nodes   []typeNode
	goTypes []string // reflect's String() of each node's Go type
}

func loadTyped() error {
	typedTable.once.Do(func() {
		t, err := decodeTypedTable(typedKindsJSON)
		if err != nil {
			typedTable.err = err
			return
		}
		typedTable.kinds, typedTable.nodes, typedTable.goTypes = t.kinds, t.nodes, t.goTypes
		for i := range typedTable.nodes {
			n := &typedTable.nodes[i]
			for j, f := range n.flat {
				if z := zero(f.typ); !omitted(f, z) {
					n.absentKept = append(n.absentKept, j)
				}
			}
		}
	})
	return typedTable.err
}

type typedTables struct {
	kinds   map[string]int
	nodes   []typeNode
	goTypes []string
}

// decodeTypedTable decodes typed_kinds.json: {"kinds": {gvk: type}, "goTypes":
// [name...], "types": [[kind, elem] | ["s", [name, type, flags]...]...]}. It
// reads the document without reflection (decodeFastValue): with
// encoding/json, the first evaluation of every new TinyGo instance spent
// about half a second here (TestTypedTableDecoding compares the two).
func decodeTypedTable(b []byte) (*typedTables, error) {
	doc, ok := decodeFastValue(b, false)
	if !ok {
		return nil, fmt.Errorf("typed_kinds.json: not a JSON object")
	}
	return decodeTypedTableDoc(doc)
}

// decodeTypedTableDoc is decodeTypedTable of the decoded document.
func decodeTypedTableDoc(doc any) (*typedTables, error) {
	in := interner{} // the strings kept are copies: see interner
	top, _ := doc.(map[string]any)
	if top == nil {
		return nil, fmt.Errorf("typed_kinds.json: not a JSON object")
	}
	kinds, _ := top["kinds"].(map[string]any)
	goTypes, _ := top["goTypes"].([]any)
	types, _ := top["types"].([]any)
	if len(goTypes) != len(types) {
		return nil, fmt.Errorf("typed_kinds.json: %d Go type names for %d types", len(goTypes), len(types))
	}
	t := &typedTables{kinds: make(map[string]int, len(kinds)), goTypes: make([]string, len(goTypes)), nodes: make([]typeNode, len(types))}
	for k, v := range kinds {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("typed_kinds.json: kind %s: not a type index", k)
		}
		t.kinds[in.s(k)] = int(n)
	}
	for i, g := range goTypes {
		t.goTypes[i], _ = g.(string)
		t.goTypes[i] = in.s(t.goTypes[i])
	}
	for i, rt := range types {
		entry, _ := rt.([]any)
		if len(entry) == 0 {
			return nil, fmt.Errorf("typed_kinds.json: type %d: not a non-empty list", i)
		}
		n := &t.nodes[i]
		n.kind, _ = entry[0].(string)
		n.kind = in.s(n.kind)
		switch n.kind {
		case "p", "l", "m":
			if len(entry) > 1 {
				elem, _ := entry[1].(int64)
				n.elem = int(elem)
			}
		case "s":
			for _, f := range entry[1:] {
				parts, ok := f.([]any)
				if !ok || len(parts) > 3 {
					return nil, fmt.Errorf("typed_kinds.json: type %d: a field is not [name, type, flags]", i)
				}
				var tf typeField
				var flags string
				if len(parts) > 0 {
					tf.name, _ = parts[0].(string)
					tf.name = in.s(tf.name)
				}
				if len(parts) > 1 {
					typ, _ := parts[1].(int64)
					tf.typ = int(typ)
				}
				if len(parts) > 2 {
					flags, _ = parts[2].(string)
				}
				tf.omitempty, tf.inline = strings.Contains(flags, "o"), strings.Contains(flags, "i")
				tf.omitzero = strings.Contains(flags, "z")
				n.fields = append(n.fields, tf)
			}
		}
	}
	finishTypedTable(t)
	return t, nil
}

// typedKind gives the table entry of a built-in kind; false for other kinds
// (custom resources stay unstructured, as the apiserver keeps them).
func typedKind(group, version, kind string) (int, bool) {
	if loadTyped() != nil {
		return 0, false
	}
	i, ok := typedTable.kinds[group+"/"+version+"/"+kind]
	return i, ok
}

// roundTripObject is decode-into-the-Go-type-then-encode for a built-in
// object (a no-op for other kinds). strict rejects unknown fields, as the
// apiserver's strict decoding of a JSON patch's result does.
func roundTripObject(obj map[string]any, group, version, kind string, strict bool) (map[string]any, error) {
	i, ok := typedKind(group, version, kind)
	if !ok || obj == nil {
		return obj, nil
	}
	var unknown []string
	out, err := roundTrip(obj, i, make(lazyPath, 0, 32), errContext{field: make(lazyPath, 0, 32)}, &unknown)
	if err != nil {
		return nil, err
	}
	if strict && len(unknown) > 0 {
		for i := range unknown {
			unknown[i] = fmt.Sprintf("unknown field %q", unknown[i])
		}
		return nil, fmt.Errorf("strict decoding error: %s", strings.Join(unknown, ", "))
	}
	m, _ := out.(map[string]any)
	return m, nil
}

// omitted: a round trip leaves field f out with the value val.
func omitted(f typeField, val any) bool {
	return (f.omitempty && isEmpty(val, f.typ)) || (f.omitzero && isZero(val, f.typ))
}

// roundTripRequestObject is roundTripObject(obj, group, version, kind,
// false) for an object the caller owns alone, decoded from raw for the
// purpose: it converts it in place (roundTripMembers), keeping its maps and
// lists instead of building new ones. Where that fails, raw is decoded
// again and roundTripObject gives the error (roundTripMembers meets the
// members in the maps' order, so its first error need not be roundTrip's).
func roundTripRequestObject(obj map[string]any, raw []byte, group, version, kind string) (map[string]any, error) {
	i, ok := typedKind(group, version, kind)
	if !ok || obj == nil {
		return obj, nil
	}
	if out, ok := roundTripMembers(obj, i); ok {
		m, _ := out.(map[string]any)
		return m, nil
	}
	again, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	return roundTripObject(again, group, version, kind, false)
}

// roundTripMembers is roundTrip on content nothing else holds, changed in
// place: a struct's map keeps its members (converted), gains the zero values
// roundTrip writes, loses the omitted members and the unknown fields; lists
// and maps keep their elements, converted. It visits a struct's members
// present in its map (then the absent fields a round trip writes,
// absentKept) instead of looking every field of the struct up: a PodSpec has
// about 40 fields, a Pod's about 12. ok=false on any error (the caller redoes it by
// roundTrip); no unknown fields are reported (deleted, as roundTrip's
// output has none). TestRoundTripMembers compares it with roundTrip.
func roundTripMembers(v any, t int) (any, bool) {
	n := &typedTable.nodes[t]
	switch n.kind {
	case "s":
		in, ok := v.(map[string]any)
		if !ok || in == nil || n.repeated {
			return roundTripNoErr(v, t)
		}
		var deleted []string
		for k, fv := range in {
			j, known := n.index[k]
			if !known {
				delete(in, k)
				deleted = append(deleted, k)
				continue
			}
			f := n.flat[j]
			var val any
			if fv != nil {
				if val, ok = roundTripMembers(fv, f.typ); !ok {
					return nil, false
				}
			} else {
				val = zero(f.typ)
			}
			if omitted(f, val) {
				delete(in, k)
				deleted = append(deleted, k)
				continue
			}
			if !unchanged(fv, val) {
				in[k] = val
			}
		}
		for _, j := range n.absentKept {
			f := n.flat[j]
			if _, present := in[f.name]; present || contains(deleted, f.name) {
				continue
			}
			in[f.name] = zero(f.typ)
		}
		return in, true
	case "p":
		if v == nil {
			return nil, true
		}
		return roundTripMembers(v, n.elem)
	case "l":
		in, ok := v.([]any)
		if !ok || in == nil {
			return roundTripNoErr(v, t)
		}
		for i, e := range in {
			val, changed, ok := roundTripElem(e, n.elem)
			if !ok {
				return nil, false
			}
			if changed {
				in[i] = val
			}
		}
		return in, true
	case "m":
		in, ok := v.(map[string]any)
		if !ok || in == nil {
			return roundTripNoErr(v, t)
		}
		for k, e := range in {
			val, changed, ok := roundTripElem(e, n.elem)
			if !ok {
				return nil, false
			}
			if changed {
				in[k] = val
			}
		}
		return in, true
	}
	return roundTripNoErr(v, t)
}

// roundTripElem is roundTripMembers on an element of a list or a map of type
// t: a null element becomes t's zero value; changed is false when the element
// can stay as it is (the container is written only where it changes).
func roundTripElem(e any, t int) (val any, changed, ok bool) {
	if e == nil {
		return zero(t), true, true
	}
	if val, ok = roundTripMembers(e, t); !ok {
		return nil, false, false
	}
	return val, !unchanged(e, val), true
}

// roundTripNoErr is roundTrip of v without its error's context.
func roundTripNoErr(v any, t int) (any, bool) {
	var unknown []string
	out, err := roundTrip(v, t, nil, errContext{}, &unknown)
	return out, err == nil
}

// unchanged: val is old itself (the same map or list, or an equal string,
// bool or number of the same type), so that roundTripMembers need not store
// it again.
func unchanged(old, val any) bool {
	switch x := val.(type) {
	case string:
		y, ok := old.(string)
		return ok && x == y
	case bool:
		y, ok := old.(bool)
		return ok && x == y
	case int64:
		y, ok := old.(int64)
		return ok && x == y
	case map[string]any:
		y, ok := old.(map[string]any)
		return ok && x != nil && y != nil && mapID(x) == mapID(y)
	}
	return false
}

// roundTripTouched is roundTripObject(obj, group, version, kind, false) for
// an object whose members outside touched (an apply configuration's patch:
// the members it names, at any depth) are the output of an earlier round
// trip: those are taken as they are (a round trip of a round trip's output
// gives it back), shared with it; the members touched names are converted
// as roundTrip converts them, with the same errors. TestRoundTripTouched
// compares it with roundTripObject.
func roundTripTouched(obj, touched map[string]any, group, version, kind string) (map[string]any, error) {
	i, ok := typedKind(group, version, kind)
	if !ok || obj == nil {
		return obj, nil
	}
	var unknown []string
	out, err := roundTripSpliced(obj, i, touched, make(lazyPath, 0, 32), errContext{field: make(lazyPath, 0, 32)}, &unknown)
	if err != nil {
		return nil, err
	}
	m, _ := out.(map[string]any)
	return m, nil
}

// roundTripSpliced is roundTrip for v whose members outside touched are
// already converted (roundTripTouched).
func roundTripSpliced(v any, t int, touched any, path lazyPath, ec errContext, unknown *[]string) (any, error) {
	n := &typedTable.nodes[t]
	if n.kind == "p" && v != nil {
		return roundTripSpliced(v, n.elem, touched, path, ec, unknown)
	}
	in, isMap := v.(map[string]any)
	tm, isTouched := touched.(map[string]any)
	if n.kind != "s" || !isMap || !isTouched {
		return roundTrip(v, t, path, ec, unknown)
	}
	name := n.short
	out := make(map[string]any, len(n.flat))
	for _, f := range n.flat {
		fv, present := in[f.name]
		ft, reached := tm[f.name]
		if !reached {
			if present {
				out[f.name] = fv
			}
			continue
		}
		var val any
		if present && fv != nil {
			var err error
			if val, err = roundTripSpliced(fv, f.typ, ft, append(path, f.name), errContext{strct: name, field: append(ec.field, f.name)}, unknown); err != nil {
				return nil, err
			}
		} else {
			val = zero(f.typ)
		}
		if (f.omitempty && isEmpty(val, f.typ)) || (f.omitzero && isZero(val, f.typ)) {
			continue
		}
		out[f.name] = val
	}
	return out, nil
}

// structFields lists a struct's fields with the inline ones flattened.
func structFields(t int) []typeField { return typedTable.nodes[t].flat }

// finishTypedTable computes what roundTrip reads of every struct of t once,
// instead of at each object it round-trips.
func finishTypedTable(t *typedTables) {
	var flatten func(i int) []typeField
	flatten = func(i int) []typeField {
		var out []typeField
		for _, f := range t.nodes[i].fields {
			if f.inline && t.nodes[f.typ].kind == "s" {
				out = append(out, flatten(f.typ)...)
				continue
			}
			out = append(out, f)
		}
		return out
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.kind != "s" {
			continue
		}
		n.flat = flatten(i)
		n.names = make(map[string]bool, len(n.flat))
		n.index = make(map[string]int, len(n.flat))
		for j, f := range n.flat {
			n.names[f.name] = true
			n.index[f.name] = j
		}
		n.short = t.goTypes[i][strings.LastIndex(t.goTypes[i], ".")+1:]
		n.repeated = len(n.names) != len(n.flat)
	}
}

// errContext is encoding/json's context of a decoding error: the struct
// whose field is being decoded and the path of struct fields to it (no list
// indices, no map keys).
type errContext struct {
	strct string
	field lazyPath
}

// lazyPath is a dotted path (join's) kept as its parts, made a string only
// for an error or an unknown field: building every field's path as a
// string took a tenth of a round trip. The parts are appended in place
// (siblings reuse the slot), so a lazyPath is read only while its call is
// on the stack.
type lazyPath []string

func (p lazyPath) String() string {
	s := ""
	for _, name := range p {
		s = join(s, name)
	}
	return s
}

// roundTrip gives v decoded into type t and encoded again; unknown collects
// the paths of fields t does not have.
func roundTrip(v any, t int, path lazyPath, ec errContext, unknown *[]string) (any, error) {
	n := &typedTable.nodes[t]
	switch n.kind {
	case "s":
		in, ok := v.(map[string]any)
		if !ok && v != nil {
			return nil, typeError(v, t, ec)
		}
		fields, known, name := n.flat, n.names, n.short
		out := make(map[string]any, len(fields))
		for _, f := range fields {
			fv, present := in[f.name]
			var val any
			if present && fv != nil {
				var err error
				if val, err = roundTrip(fv, f.typ, append(path, f.name), errContext{strct: name, field: append(ec.field, f.name)}, unknown); err != nil {
					return nil, err
				}
			} else {
				val = zero(f.typ)
			}
			if (f.omitempty && isEmpty(val, f.typ)) || (f.omitzero && isZero(val, f.typ)) {
				continue
			}
			out[f.name] = val
		}
		if len(in) > len(known) || !allKnown(in, known) {
			var extra []string
			for k := range in {
				if !known[k] {
					extra = append(extra, join(path.String(), k))
				}
			}
			sort.Strings(extra)
			*unknown = append(*unknown, extra...)
		}
		return out, nil
	case "p":
		if v == nil {
			return nil, nil
		}
		return roundTrip(v, n.elem, path, ec, unknown)
	case "l":
		if v == nil {
			return nil, nil
		}
		in, ok := v.([]any)
		if !ok {
			return nil, typeError(v, t, ec)
		}
		out := make([]any, len(in))
		for i, e := range in {
			var err error
			if e == nil {
				out[i] = zero(n.elem)
				continue
			}
			if out[i], err = roundTrip(e, n.elem, path, ec, unknown); err != nil {
				return nil, err
			}
		}
		return out, nil
	case "m":
		if v == nil {
			return nil, nil
		}
		in, ok := v.(map[string]any)
		if !ok {
			return nil, typeError(v, t, ec)
		}
		out := make(map[string]any, len(in))
		for k, e := range in {
			if e == nil {
				out[k] = zero(n.elem)
				continue
			}
			var err error
			if out[k], err = roundTrip(e, n.elem, append(path, k), ec, unknown); err != nil {
				return nil, err
			}
		}
		return out, nil
	case "string":
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, typeError(v, t, ec)
	case "bool":
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, typeError(v, t, ec)
	case "int", "uint":
		if x, ok := v.(int64); ok && fitsInt(x, n.kind == "uint", typedTable.goTypes[t]) {
			return x, nil
		}
		return nil, typeError(v, t, ec)
	case "float":
		switch x := v.(type) {
		case int64:
			return float64(x), nil
		case float64:
			if typedTable.goTypes[t] == "float32" && math.Abs(x) > math.MaxFloat32 {
				return nil, typeError(v, t, ec)
			}
			return x, nil
		}
		return nil, typeError(v, t, ec)
	case "bytes":
		s, ok := v.(string)
		if !ok {
			return nil, typeError(v, t, ec)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path.String(), err)
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case "time", "microtime":
		s, ok := v.(string)
		if !ok {
			return nil, typeError(v, t, ec)
		}
		layout := time.RFC3339
		if n.kind == "microtime" {
			layout = "2006-01-02T15:04:05.000000Z07:00"
		}
		if s == "" {
			return nil, nil
		}
		tm, err := time.Parse(layout, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path.String(), err)
		}
		return tm.UTC().Format(layout), nil
	case "quantity":
		var q resource.Quantity
		var err error
		switch x := v.(type) {
		case string:
			q, err = resource.ParseQuantity(x)
		case int64:
			q = *resource.NewQuantity(x, resource.DecimalSI)
		case float64:
			q, err = resource.ParseQuantity(fmt.Sprint(x))
		default:
			return nil, typeError(v, t, ec)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path.String(), err)
		}
		return q.String(), nil
	case "intorstr":
		switch x := v.(type) {
		case string:
			return x, nil
		case int64:
			if fitsInt(x, false, "int32") {
				return x, nil
			}
		}
		return nil, typeError(v, t, ec)
	case "duration":
		s, ok := v.(string)
		if !ok {
			return nil, typeError(v, t, ec)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path.String(), err)
		}
		return d.String(), nil
	}
	return v, nil // raw
}

func allKnown(in map[string]any, known map[string]bool) bool {
	for k := range in {
		if !known[k] {
			return false
		}
	}
	return true
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// typeError is encoding/json's UnmarshalTypeError for v decoded into type t
// (a number that does not fit an integer or float type is quoted).
//
// Times and durations decode a string first, an int-or-string an int32 when
// it is not a string: their errors name that type.
func typeError(v any, t int, ec errContext) error {
	value, typ := jsonTypeName(v), typedTable.goTypes[t]
	switch typedTable.nodes[t].kind {
	case "time", "microtime", "duration":
		typ = "string"
	case "intorstr":
		typ = "int32"
	}
	switch typ {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		if value == "number" {
			lit, _ := json.Marshal(v)
			value += " " + string(lit)
		}
	}
	if ec.strct == "" && ec.field.String() == "" {
		return fmt.Errorf("json: cannot unmarshal %s into Go value of type %s", value, typ)
	}
	return fmt.Errorf("json: cannot unmarshal %s into Go struct field %s.%s of type %s", value, ec.strct, ec.field.String(), typ)
}

// fitsInt: x fits the Go integer type named goType (int8 ... uint64).
func fitsInt(x int64, unsigned bool, goType string) bool {
	bits := 64
	for _, b := range []int{8, 16, 32} {
		if strings.HasSuffix(goType, fmt.Sprint(b)) {
			bits = b
		}
	}
	if unsigned {
		return x >= 0 && (bits == 64 || x < int64(1)<<bits)
	}
	return bits == 64 || (x >= -(int64(1)<<(bits-1)) && x < int64(1)<<(bits-1))
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	case int64, float64:
		return "number"
	}
	return "null"
}

// zero is how a type's zero value encodes.
func zero(t int) any {
	n := &typedTable.nodes[t]
	switch n.kind {
	case "s":
		out := map[string]any{}
		for _, f := range structFields(t) {
			val := zero(f.typ)
			if (f.omitempty && isEmpty(val, f.typ)) || f.omitzero {
				continue
			}
			out[f.name] = val
		}
		return out
	case "string":
		return ""
	case "bool":
		return false
	case "int", "uint":
		return int64(0)
	case "float":
		return float64(0)
	case "quantity":
		return "0"
	case "intorstr":
		return int64(0)
	case "duration":
		return "0s"
	}
	return nil // pointers, lists, maps, bytes, times, raw
}

// isZero is encoding/json's omitzero test (the value's IsZero method, or
// the Go zero value) on an encoded value of type t.
func isZero(v any, t int) bool {
	n := &typedTable.nodes[t]
	switch n.kind {
	case "s":
		m, _ := v.(map[string]any)
		for _, f := range structFields(t) {
			if fv, ok := m[f.name]; ok && !isZero(fv, f.typ) {
				return false
			}
		}
		return true
	case "l", "m", "p", "raw", "bytes", "time", "microtime":
		return v == nil // a time's IsZero: encoded as null
	case "quantity":
		return v == "0" || v == nil
	case "intorstr":
		return v == int64(0) || v == nil
	case "duration":
		return v == "0s" || v == nil
	}
	return isEmpty(v, t)
}

// isEmpty is encoding/json's omitempty test on the Go value behind an
// encoded value of type t: structs (times, quantities included) are never empty.
func isEmpty(v any, t int) bool {
	switch typedTable.nodes[t].kind {
	case "s", "time", "microtime", "quantity", "intorstr", "duration":
		return false
	case "p", "raw":
		return v == nil
	}
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case int64:
		return x == 0
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
