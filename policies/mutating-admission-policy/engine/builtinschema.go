package engine

import (
	"bytes"
	_ "embed"
	"encoding/gob"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// builtinSchema is the structured-merge schema of every built-in type, as
// client-go v0.36.6 compiles it in (applyconfigurations' parser), stored in
// gob form: parsing client-go's YAML takes 4 s in the Wasm sandbox, decoding
// this 50 ms. TestBuiltinSchemaUpToDate fails when it no longer equals
// client-go's; `go test ./engine -run TestBuiltinSchemaUpToDate -update`
// regenerates it.
//
//go:embed builtin_schema.gob
var builtinSchema []byte

func init() {
	// Default values of fields are decoded from YAML as these types.
	gob.Register(map[interface{}]interface{}{})
	gob.Register([]interface{}{})
}

// decodeSchema decodes a schema into a parser (a Schema must not be copied).
func decodeSchema(b []byte) (*typed.Parser, error) {
	p := &typed.Parser{}
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&p.Schema); err != nil {
		return nil, fmt.Errorf("decoding the built-in schema: %w", err)
	}
	return p, nil
}

func encodeSchema(s *schema.Schema) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&schema.Schema{Types: s.Types}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var builtinConverter struct {
	once   sync.Once
	tc     managedfields.TypeConverter
	parser *typed.Parser // the schema tc uses (read by mergeSchema)
	err    error
}

// builtinTypeConverter returns the type converter of the built-in types,
// decoding the schema on first use.
func builtinTypeConverter(sch *runtime.Scheme) (managedfields.TypeConverter, error) {
	builtinConverter.once.Do(func() {
		p, err := decodeSchema(builtinSchema)
		if err != nil {
			builtinConverter.err = err
			return
		}
		builtinConverter.parser = p
		builtinConverter.tc = managedfields.NewSchemeTypeConverter(sch, p)
	})
	return builtinConverter.tc, builtinConverter.err
}
