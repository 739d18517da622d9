package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
)

// mergeSchemaEntry is the structured-merge schema and root type of a kind;
// s is nil when there is none.
type mergeSchemaEntry struct {
	s    *smdschema.Schema
	root smdschema.TypeRef
}

type mergeSchemaKey struct {
	scheme *runtime.Scheme
	gvk    schema.GroupVersionKind
}

// mergeSchemas caches mergeSchema per scheme and kind (the engine is used
// concurrently; entries are immutable).
var mergeSchemas sync.Map // mergeSchemaKey -> mergeSchemaEntry

// mergeSchema returns the schema and root type with which the type converter
// of gvk (GetTypeConverter) types objects of that kind, for fastApply.
// ok=false when there is none to give (the built-in schema failed to
// decode); fastApply must then not be used.
//
// For a built-in kind that is client-go's schema and the type the scheme
// names for gvk, as managedfields' scheme type converter looks it up. For any
// other kind, the schemaless converter builds a schema from the apply
// configuration (every field it sets declared, with the same type as an
// undeclared one); merging with that schema gives the same result as with
// the fixed schema returned here, whose root declares no field: maps merge
// key by key, every list is atomic, any scalar fits. (The fixed schema makes
// findAtomics see less, but fastApply declines every atomic it meets.)
func (t *typeConverters) mergeSchema(gvk schema.GroupVersionKind) (*smdschema.Schema, smdschema.TypeRef, bool) {
	key := mergeSchemaKey{t.scheme, gvk}
	if e, ok := mergeSchemas.Load(key); ok {
		e := e.(mergeSchemaEntry)
		return e.s, e.root, e.s != nil
	}
	e := t.lookupMergeSchema(gvk)
	mergeSchemas.Store(key, e)
	return e.s, e.root, e.s != nil
}

func (t *typeConverters) lookupMergeSchema(gvk schema.GroupVersionKind) mergeSchemaEntry {
	switch tc := t.GetTypeConverter(gvk).(type) {
	case *schemalessConverter:
		s, root := schemalessMergeSchema()
		return mergeSchemaEntry{s: s, root: root}
	case nil:
		return mergeSchemaEntry{}
	default:
		static, err := builtinTypeConverter(t.scheme)
		if err != nil || managedfields.TypeConverter(tc) != static || builtinConverter.parser == nil {
			return mergeSchemaEntry{}
		}
		name, err := t.scheme.ToOpenAPIDefinitionName(gvk)
		if err != nil {
			return mergeSchemaEntry{}
		}
		return mergeSchemaEntry{s: &builtinConverter.parser.Schema, root: smdschema.TypeRef{NamedType: &name}}
	}
}

var schemaless struct {
	once sync.Once
	c    schemalessConverter
}

// schemalessMergeSchema is the schemaless converter's schema for an apply
// configuration that sets no field.
func schemalessMergeSchema() (*smdschema.Schema, smdschema.TypeRef) {
	schemaless.once.Do(func() { schemaless.c.build(map[string]any{}) })
	return schemaless.c.schema, schemaless.c.root
}
