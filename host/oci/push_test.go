package oci_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

// Bad modules are refused before any network access (the client points at
// no registry at all).
func TestPushRefusesBadModules(t *testing.T) {
	c, err := oci.NewClient(oci.Options{StorePath: t.TempDir(), Sources: &oci.Sources{}})
	if err != nil {
		t.Fatal(err)
	}
	uri := "registry://127.0.0.1:1/p:v1"
	tests := []struct {
		name string
		wasm []byte
		want error
	}{
		{"shell script", []byte("#!/bin/sh\necho hi\n"), oci.ErrInvalidModule},
		{"empty", nil, oci.ErrInvalidModule},
		{"no metadata", ocitest.Wasm(nil, 0), oci.ErrUnannotated},
		{"bad metadata JSON", append(ocitest.Wasm(nil, 0), 0, 24, 22, 'i', 'o', '.', 'k', 'u', 'b', 'e', 'w', 'a', 'r', 'd', 'e', 'n', '.', 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', '{'), oci.ErrInvalidModule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Push(context.Background(), tt.wasm, uri, oci.PushOptions{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}
