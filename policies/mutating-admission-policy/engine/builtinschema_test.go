package engine

import (
	"flag"
	"os"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/applyconfigurations"
)

var update = flag.Bool("update", false, "regenerate builtin_schema.gob from client-go")

func TestBuiltinSchemaUpToDate(t *testing.T) {
	stub := &unstructured.Unstructured{}
	stub.SetAPIVersion("v1")
	stub.SetKind("Pod")
	tv, err := applyconfigurations.NewTypeConverter(objectScheme).ObjectToTyped(stub)
	if err != nil {
		t.Fatal(err)
	}
	want := tv.Schema()
	if *update {
		b, err := encodeSchema(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("builtin_schema.gob", b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := decodeSchema(builtinSchema)
	if err != nil {
		t.Fatal(err)
	}
	// Compare after the same gob round trip (gob drops empty slices and zero values).
	wantBytes, err := encodeSchema(want)
	if err != nil {
		t.Fatal(err)
	}
	wantRT, err := decodeSchema(wantBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Schema.Types, wantRT.Schema.Types) {
		t.Fatal("builtin_schema.gob differs from client-go's schema: run go test ./engine -run TestBuiltinSchemaUpToDate -update")
	}
	if len(got.Schema.Types) < 500 {
		t.Fatalf("only %d types", len(got.Schema.Types))
	}
}
