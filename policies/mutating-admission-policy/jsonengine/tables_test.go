package jsonengine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/schema"
)

// TestTypedTableDecoding: the typed table decoded without reflection
// (decodeTypedTable) is the one encoding/json gives (the decoding it
// replaced, below).
func TestTypedTableDecoding(t *testing.T) {
	got, err := decodeTypedTable(typedKindsJSON)
	if err != nil {
		t.Fatal(err)
	}
	want, err := decodeTypedTableLibrary(typedKindsJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.nodes) < 100 || !reflect.DeepEqual(got, want) {
		t.Fatalf("the tables differ (%d and %d types)", len(got.nodes), len(want.nodes))
	}
}

// TestSMDSchemaDecoding: the same for the structured-merge schema.
func TestSMDSchemaDecoding(t *testing.T) {
	got, err := decodeSMDSchema(smdSchemaJSON)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Kinds map[string]string `json:"kinds"`
		Types [][2]any          `json:"types"`
	}
	if err := json.Unmarshal(smdSchemaJSON, &raw); err != nil {
		t.Fatal(err)
	}
	want := &smdSchema{schema: &schema.Schema{Types: make([]schema.TypeDef, len(raw.Types))}, kinds: raw.Kinds}
	for i, tt := range raw.Types {
		name, _ := tt[0].(string)
		atom, err := decodeAtom(tt[1], interner{})
		if err != nil {
			t.Fatal(err)
		}
		want.schema.Types[i] = schema.TypeDef{Name: name, Atom: atom}
	}
	if len(want.schema.Types) < 100 || !reflect.DeepEqual(got, want) {
		t.Fatalf("the schemas differ (%d and %d types)", len(got.schema.Types), len(want.schema.Types))
	}
}

// decodeTypedTableLibrary is decodeTypedTable as it was, by encoding/json.
func decodeTypedTableLibrary(b []byte) (*typedTables, error) {
	var raw struct {
		Kinds   map[string]int    `json:"kinds"`
		GoTypes []string          `json:"goTypes"`
		Types   []json.RawMessage `json:"types"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	t := &typedTables{kinds: raw.Kinds, goTypes: raw.GoTypes, nodes: make([]typeNode, len(raw.Types))}
	for i, rt := range raw.Types {
		var entry []json.RawMessage
		if err := json.Unmarshal(rt, &entry); err != nil || len(entry) == 0 {
			return nil, fmt.Errorf("type %d: %v", i, err)
		}
		n := &t.nodes[i]
		_ = json.Unmarshal(entry[0], &n.kind)
		switch n.kind {
		case "p", "l", "m":
			_ = json.Unmarshal(entry[1], &n.elem)
		case "s":
			for _, f := range entry[1:] {
				var parts [3]json.RawMessage
				if err := json.Unmarshal(f, &parts); err != nil {
					return nil, err
				}
				var tf typeField
				var flags string
				_ = json.Unmarshal(parts[0], &tf.name)
				_ = json.Unmarshal(parts[1], &tf.typ)
				_ = json.Unmarshal(parts[2], &flags)
				tf.omitempty, tf.inline = strings.Contains(flags, "o"), strings.Contains(flags, "i")
				tf.omitzero = strings.Contains(flags, "z")
				n.fields = append(n.fields, tf)
			}
		}
	}
	finishTypedTable(t)
	return t, nil
}
