package module

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var wasmBytes = []byte("\x00asm\x01\x00\x00\x00")

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.wasm")
	if err := os.WriteFile(path, wasmBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/p.wasm":
			w.Write(wasmBytes)
		case "/big.wasm":
			w.Write(make([]byte, 100))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	r := &Resolver{HTTPClient: srv.Client(), MaxBytes: 64,
		Builtin: func(name string) ([]byte, error) {
			if name == "known" {
				return wasmBytes, nil
			}
			return nil, errors.New("no such built-in")
		}}
	ctx := context.Background()
	for _, uri := range []string{path, "file://" + path, srv.URL + "/p.wasm", "builtin://known"} {
		m, err := r.Resolve(ctx, uri)
		if err != nil || string(m.Wasm) != string(wasmBytes) || m.URI != uri {
			t.Fatalf("%s: %v %+v", uri, err, m)
		}
	}
	tests := []struct {
		uri  string
		want error
		text string
	}{
		{filepath.Join(dir, "missing.wasm"), ErrFetch, "no such file"},
		{dir, ErrFetch, "is a directory"},
		{srv.URL + "/nope.wasm", ErrFetch, "404"},
		{srv.URL + "/big.wasm", ErrTooLarge, "limit of 64"},
		{"http://127.0.0.1:1/p.wasm", ErrFetch, "plain http:// is not allowed"},
		{"ftp://host/p.wasm", ErrUnknownScheme, `"ftp"`},
		{"builtin://unknown", ErrFetch, "no such built-in"},
		{"registry://localhost:5000/p:v1", ErrFetch, "not supported"},
	}
	for _, tt := range tests {
		_, err := r.Resolve(ctx, tt.uri)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("%s: want %v containing %q, got %v", tt.uri, tt.want, tt.text, err)
		}
	}
	big := filepath.Join(dir, "big.wasm")
	os.WriteFile(big, make([]byte, 65), 0o644)
	if _, err := r.Resolve(ctx, big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("large file: want ErrTooLarge, got %v", err)
	}
}
