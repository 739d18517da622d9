package jsonengine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
)

// TestSMDSchemaUpToDate checks that smd_schema.json is client-go v0.36.6's
// compiled-in structured-merge schema of the built-in types (what the
// apiserver's type converters use), with the type name of each built-in
// kind; -update writes it. It also checks that decoding the file gives the
// same schema.
func TestSMDSchemaUpToDate(t *testing.T) {
	stub := &unstructured.Unstructured{}
	stub.SetAPIVersion("v1")
	stub.SetKind("Pod")
	tv, err := applyconfigurations.NewTypeConverter(scheme.Scheme).ObjectToTyped(stub)
	if err != nil {
		t.Fatal(err)
	}
	s := tv.Schema()
	names := map[string]bool{}
	for _, td := range s.Types {
		names[td.Name] = true
	}
	kinds := map[string]string{}
	for _, gvk := range sortedKinds() {
		name, err := scheme.Scheme.ToOpenAPIDefinitionName(gvk)
		if err != nil || !names[name] {
			continue
		}
		kinds[gvk.Group+"/"+gvk.Version+"/"+gvk.Kind] = name
	}
	got, err := encodeSMDSchema(s, kinds)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("smd_schema.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, smdSchemaJSON) {
		t.Fatal("smd_schema.json is not client-go's schema: run go test ./jsonengine -run TestSMDSchemaUpToDate -update")
	}
	decoded, err := decodeSMDSchema(smdSchemaJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(decoded.schema.Types) != len(s.Types) || len(decoded.kinds) < 150 {
		t.Fatalf("%d types decoded of %d, %d kinds", len(decoded.schema.Types), len(s.Types), len(decoded.kinds))
	}
	again, err := encodeSMDSchema(decoded.schema, decoded.kinds)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, smdSchemaJSON) {
		t.Fatal("smd_schema.json does not decode to the schema it was made from")
	}
}

// encodeSMDSchema writes a schema in the form decodeSMDSchema reads (see smd.go).
func encodeSMDSchema(s *smdschema.Schema, kinds map[string]string) ([]byte, error) {
	var types []any
	for _, td := range s.Types {
		types = append(types, []any{td.Name, encodeAtom(td.Atom)})
	}
	b, err := json.Marshal(map[string]any{"kinds": kinds, "types": types})
	if err != nil {
		return nil, err
	}
	return bytes.ReplaceAll(b, []byte(`]],["`), []byte("]],\n[\"")), nil
}

func encodeAtom(a smdschema.Atom) map[string]any {
	out := map[string]any{}
	if a.Scalar != nil {
		out["s"] = string(*a.Scalar)
	}
	if l := a.List; l != nil {
		out["l"] = []any{encodeRef(l.ElementType), string(l.ElementRelationship), l.Keys}
	}
	if m := a.Map; m != nil {
		var fields []any
		for _, f := range m.Fields {
			field := []any{f.Name, encodeRef(f.Type)}
			if f.Default != nil {
				field = append(field, jsonDefault(f.Default))
			}
			fields = append(fields, field)
		}
		entry := []any{encodeRef(m.ElementType), string(m.ElementRelationship), fields}
		if len(m.Unions) > 0 {
			var unions []any
			for _, u := range m.Unions {
				var fs []any
				for _, f := range u.Fields {
					fs = append(fs, []any{f.FieldName, f.DiscriminatorValue})
				}
				unions = append(unions, []any{u.Discriminator, u.DeduceInvalidDiscriminator, fs})
			}
			entry = append(entry, unions)
		}
		out["m"] = entry
	}
	return out
}

func encodeRef(r smdschema.TypeRef) any {
	if r.NamedType != nil && r.ElementRelationship == nil && reflect.DeepEqual(r.Inlined, smdschema.Atom{}) {
		return *r.NamedType
	}
	out := map[string]any{}
	if r.NamedType != nil {
		out["n"] = *r.NamedType
	}
	if !reflect.DeepEqual(r.Inlined, smdschema.Atom{}) {
		out["i"] = encodeAtom(r.Inlined)
	}
	if r.ElementRelationship != nil {
		out["r"] = string(*r.ElementRelationship)
	}
	return out
}

// jsonDefault gives a default value (decoded from YAML: map[any]any, ints)
// as encoding/json decodes it back (map[string]any, float64).
func jsonDefault(v any) any {
	switch x := v.(type) {
	case map[any]any:
		m := map[string]any{}
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonDefault(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = jsonDefault(e)
		}
		return l
	case int:
		return float64(x)
	case int64:
		return float64(x)
	}
	return v
}
