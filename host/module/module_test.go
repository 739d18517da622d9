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

// TestResolveErrorsMaskCredentials: a URI's password and credential query
// values are sent to the server but never appear in an error, nor does a
// redirect's signed URL; errors.Is still sees the kind of failure.
func TestResolveErrorsMaskCredentials(t *testing.T) {
	var sawAuth bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, _ := r.BasicAuth(); u == "bob" && p == "pa55word" && r.URL.Query().Get("access_token") == "at-secret" {
			sawAuth = true
		}
		switch r.URL.Path {
		case "/redirect.wasm":
			http.Redirect(w, r, "/signed.wasm?X-Amz-Signature=redirect-secret&X-Amz-Expires=60", http.StatusFound)
		default:
			http.Error(w, "denied", http.StatusForbidden)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	r := &Resolver{HTTPClient: srv.Client()}
	for _, uri := range []string{
		"https://bob:pa55word@" + host + "/x.wasm?access_token=at-secret",
		"https://bob:pa55word@" + host + "/redirect.wasm",
		"https://bob:pa55word@127.0.0.1:1/x.wasm?access_token=at-secret", // connection refused: net/http's own error
		"ftp://bob:pa55word@host/x.wasm",
		"builtin://bob:pa55word@x",
	} {
		_, err := r.Resolve(context.Background(), uri)
		if err == nil || !(errors.Is(err, ErrFetch) || errors.Is(err, ErrUnknownScheme)) {
			t.Errorf("%s: %v", uri, err)
			continue
		}
		for _, s := range []string{"pa55word", "at-secret", "redirect-secret"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: the error shows %q: %v", uri, s, err)
			}
		}
		if !strings.Contains(err.Error(), "bob:xxxxx@") {
			t.Errorf("%s: the error does not name the URI: %v", uri, err)
		}
	}
	if !sawAuth {
		t.Error("the server never saw the URI's credentials")
	}
}
