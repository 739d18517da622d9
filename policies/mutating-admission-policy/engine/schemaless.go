package engine

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// schemalessConverter is the structured-merge type converter for kinds
// without a known schema (custom resources: the sandbox cannot read their
// CRD). It behaves like the schema of a CRD that declares exactly the fields
// it is given, with the defaults of CRD schemas: objects merge field by field
// and every list is atomic, so an apply configuration that sets a list is
// rejected with the apiserver's "may not mutate atomic arrays" error.
//
// The schema is built from the first object converted (the apply
// configuration, which the patcher converts first) and reused for the live
// object, since a merge needs both sides typed by one schema. A converter is
// therefore made fresh for each mutation.
type schemalessConverter struct {
	schema *schema.Schema
	root   schema.TypeRef
}

var _ managedfields.TypeConverter = &schemalessConverter{}

const (
	untypedGranular = "__tollgate_untyped_granular"
	untypedAtomic   = "__tollgate_untyped_atomic"
)

func (c *schemalessConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	var content map[string]any
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		content = o.UnstructuredContent()
	default:
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		content = u
	}
	if c.schema == nil {
		c.build(content)
	}
	return typed.ParseableType{Schema: c.schema, TypeRef: c.root}.FromUnstructured(content, opts...)
}

func (c *schemalessConverter) TypedToObject(v *typed.TypedValue) (runtime.Object, error) {
	m, ok := v.AsValue().Unstructured().(map[string]any)
	if !ok {
		return nil, fmt.Errorf("typed value is not an object")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func (c *schemalessConverter) build(content map[string]any) {
	untyped := schema.Scalar("untyped")
	s := &schema.Schema{Types: []schema.TypeDef{
		{Name: untypedAtomic, Atom: schema.Atom{
			Scalar: &untyped,
			List:   &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic},
			Map:    &schema.Map{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic},
		}},
		{Name: untypedGranular, Atom: schema.Atom{
			Scalar: &untyped,
			List:   &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic},
			Map:    &schema.Map{ElementType: named(untypedGranular), ElementRelationship: schema.Separable},
		}},
	}}
	n := 0
	var declare func(v any) schema.TypeRef
	declare = func(v any) schema.TypeRef {
		switch tv := v.(type) {
		case map[string]any:
			name := "__tollgate_object_" + strconv.Itoa(n)
			n++
			m := &schema.Map{ElementType: named(untypedGranular), ElementRelationship: schema.Separable}
			for k, child := range tv {
				m.Fields = append(m.Fields, schema.StructField{Name: k, Type: declare(child)})
			}
			untyped := schema.Scalar("untyped")
			s.Types = append(s.Types, schema.TypeDef{Name: name, Atom: schema.Atom{Scalar: &untyped, Map: m,
				List: &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic}}})
			return named(name)
		default:
			return named(untypedGranular)
		}
	}
	c.root = declare(content)
	c.schema = s
}

func named(n string) schema.TypeRef { return schema.TypeRef{NamedType: &n} }
