package oci

import (
	"errors"
	"testing"
)

func wasmWith(sections ...[]byte) []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range sections {
		out = append(out, s...)
	}
	return out
}

func custom(name, payload string) []byte {
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, payload...)
	return append([]byte{0, byte(len(body))}, body...)
}

func TestModuleAnnotations(t *testing.T) {
	tests := []struct {
		name    string
		wasm    []byte
		want    map[string]string
		found   bool
		wantErr error
	}{
		{"none", wasmWith(), nil, false, nil},
		{"other section", wasmWith(custom("name", "x")), nil, false, nil},
		{"metadata", wasmWith(custom("name", "x"), custom(metadataSection, `{"annotations":{"a":"b"}}`)), map[string]string{"a": "b"}, true, nil},
		{"metadata no annotations", wasmWith(custom(metadataSection, `{"protocolVersion":"v1"}`)), nil, true, nil},
		{"bad json", wasmWith(custom(metadataSection, `{`)), nil, true, ErrInvalidModule},
		{"not wasm", []byte("hello world"), nil, false, ErrInvalidModule},
		{"component", []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, nil, false, ErrInvalidModule},
		{"truncated section", append(wasmWith(), 0, 50, 1), nil, false, ErrInvalidModule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := moduleAnnotations(tt.wasm)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			if found != tt.found || len(got) != len(tt.want) || got["a"] != tt.want["a"] {
				t.Fatalf("got %v %v", got, found)
			}
		})
	}
}

func FuzzCustomSection(f *testing.F) {
	f.Add(wasmWith(custom(metadataSection, `{"annotations":{}}`)))
	f.Add([]byte{0, 'a', 's', 'm', 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = moduleAnnotations(b) // must not panic
	})
}
