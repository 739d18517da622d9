package jsonengine

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

var update = flag.Bool("update", false, "regenerate typed_kinds.json from client-go's types")

// TestTypedTableUpToDate checks that typed_kinds.json describes the Go types
// of client-go v0.36.6's scheme (what the apiserver decodes built-in objects
// into); -update writes it.
func TestTypedTableUpToDate(t *testing.T) {
	got := generateTypedTable(t)
	if *update {
		if err := os.WriteFile("typed_kinds.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("typed_kinds.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("typed_kinds.json is not what client-go's types give: run go test ./jsonengine -run TestTypedTableUpToDate -update")
	}
}

func generateTypedTable(t *testing.T) []byte {
	g := &typeGen{index: map[reflect.Type]int{}}
	kinds := map[string]int{}
	known := scheme.Scheme.AllKnownTypes()
	for _, gvk := range sortedKinds() {
		typ := known[gvk]
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") {
			continue
		}
		if typ.Kind() != reflect.Struct {
			continue
		}
		kinds[gvk.Group+"/"+gvk.Version+"/"+gvk.Kind] = g.add(typ)
	}
	out, err := json.Marshal(struct {
		Kinds   map[string]int `json:"kinds"`
		GoTypes []string       `json:"goTypes"`
		Types   [][]any        `json:"types"`
	}{kinds, g.goTypes, g.types})
	if err != nil {
		t.Fatal(err)
	}
	// One type a line, for readable diffs.
	return bytes.ReplaceAll(out, []byte("],["), []byte("],\n["))
}

type typeGen struct {
	index   map[reflect.Type]int
	types   [][]any
	goTypes []string // reflect's String() of each type, for decoding errors
}

var (
	timeType       = reflect.TypeOf(metav1.Time{})
	microTimeType  = reflect.TypeOf(metav1.MicroTime{})
	quantityType   = reflect.TypeOf(resource.Quantity{})
	intOrStrType   = reflect.TypeOf(intstr.IntOrString{})
	durationType   = reflect.TypeOf(metav1.Duration{})
	marshalerType  = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	unmarshalerTyp = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// add gives the index of typ's entry, adding it (and what it refers to).
// Entries: [kindName] for scalars and values kept as they are, ["p"|"l"|"m",
// elem] for pointers, slices and maps, ["s", [name, type, flags]...] for
// structs, where flags has "o" for omitempty, "z" for omitzero and "i" for
// inline.
func (g *typeGen) add(typ reflect.Type) int {
	if i, ok := g.index[typ]; ok {
		return i
	}
	i := len(g.types)
	g.index[typ] = i
	g.types = append(g.types, nil)
	g.goTypes = append(g.goTypes, typ.String())
	g.types[i] = g.describe(typ)
	return i
}

func (g *typeGen) describe(typ reflect.Type) []any {
	switch typ {
	case timeType:
		return []any{"time"}
	case microTimeType:
		return []any{"microtime"}
	case quantityType:
		return []any{"quantity"}
	case intOrStrType:
		return []any{"intorstr"}
	case durationType:
		return []any{"duration"}
	}
	if typ.Implements(marshalerType) || reflect.PointerTo(typ).Implements(unmarshalerTyp) {
		return []any{"raw"} // runtime.RawExtension, apiextensions' JSON, ...: kept as given
	}
	switch typ.Kind() {
	case reflect.String:
		return []any{"string"}
	case reflect.Bool:
		return []any{"bool"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return []any{"int"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return []any{"uint"}
	case reflect.Float32, reflect.Float64:
		return []any{"float"}
	case reflect.Pointer:
		return []any{"p", g.add(typ.Elem())}
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Uint8 {
			return []any{"bytes"}
		}
		return []any{"l", g.add(typ.Elem())}
	case reflect.Map:
		return []any{"m", g.add(typ.Elem())}
	case reflect.Interface:
		return []any{"raw"}
	case reflect.Struct:
		out := []any{"s"}
		var names []string
		fields := map[string][]any{}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			flags := ""
			if strings.Contains(","+opts+",", ",omitempty,") {
				flags += "o"
			}
			if strings.Contains(","+opts+",", ",omitzero,") {
				flags += "z"
			}
			if strings.Contains(","+opts+",", ",inline,") || (f.Anonymous && name == "") {
				flags += "i"
			}
			if name == "" {
				name = f.Name
			}
			fields[name] = []any{name, g.add(f.Type), flags}
			names = append(names, name)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, fields[n])
		}
		return out
	}
	return []any{"raw"}
}

// sortedKinds lists the kinds of client-go's scheme in a stable order.
func sortedKinds() []schema.GroupVersionKind {
	var gvks []schema.GroupVersionKind
	for gvk := range scheme.Scheme.AllKnownTypes() {
		gvks = append(gvks, gvk)
	}
	sort.Slice(gvks, func(i, j int) bool { return gvks[i].String() < gvks[j].String() })
	return gvks
}
