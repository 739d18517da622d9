package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestURI(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://user:pw@host/x.wasm", "https://user:xxxxx@host/x.wasm"},
		{"https://ghp_abcdef@github.com/o/r/x.wasm", "https://xxxxx@github.com/o/r/x.wasm"},
		{"registry://robot:s3cr%40t@reg.example:5000/p/x:v1", "registry://robot:xxxxx@reg.example:5000/p/x:v1"},
		{"https://b.s3.amazonaws.com/x.wasm?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc123&versionId=7",
			"https://b.s3.amazonaws.com/x.wasm?X-Amz-Algorithm=xxxxx&X-Amz-Credential=xxxxx&X-Amz-Signature=xxxxx&versionId=7"},
		{"https://acct.blob.core.windows.net/c/x.wasm?sv=2024&sig=Zm9v%3D&se=2030", "https://acct.blob.core.windows.net/c/x.wasm?sv=2024&sig=xxxxx&se=2030"},
		{"https://h/x.wasm?private_token=glpat-1&ref=main#frag", "https://h/x.wasm?private_token=xxxxx&ref=main#xxxxx"},
		// bearer, in any case; the fragment, with or without a query, '?' in it or not
		{"https://h/x.wasm?bearer=b1&Bearer=b2&BEARER=b3&bearer_token=b4&x-bearer=b5&v=1", "https://h/x.wasm?bearer=xxxxx&Bearer=xxxxx&BEARER=xxxxx&bearer_token=xxxxx&x-bearer=xxxxx&v=1"},
		{"https://h/x.wasm#access_token=abc&token_type=bearer", "https://h/x.wasm#xxxxx"},
		{"https://h/x.wasm#frag?token=t", "https://h/x.wasm#xxxxx"},
		{"https://h#frag", "https://h#xxxxx"},
		{"registry://h/p/x:v1?v=1#s3cr3t", "registry://h/p/x:v1?v=1#xxxxx"},
		{"https://h/x.wasm?Password=a&API_KEY=b&access_token=c&code=d&flag", "https://h/x.wasm?Password=xxxxx&API_KEY=xxxxx&access_token=xxxxx&code=xxxxx&flag"},
		{"https://u:p@h/x?token=t", "https://u:xxxxx@h/x?token=xxxxx"},
		{"https://host:8443/x.wasm", "https://host:8443/x.wasm"},
		{"http://h/a@b/x.wasm", "http://h/a@b/x.wasm"}, // '@' in the path is no userinfo
		{"https://u:p@h?token=t", "https://u:xxxxx@h?token=xxxxx"},
		{"/policies/x.wasm", "/policies/x.wasm"},
		{"file:///policies/x.wasm", "file:///policies/x.wasm"},
		{"builtin://examples/required-labels", "builtin://examples/required-labels"},
		{"https://u:p w@h/x", "https://u:xxxxx@h/x"}, // does not parse as a URL: still masked
		{"", ""},
	} {
		if got := URI(tt.in); got != tt.want {
			t.Errorf("URI(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	uri := "https://alice:hunter22@h.example/x.wasm?sig=c2lnbmF0dXJl%3D&v=1"
	for _, tt := range []struct{ in, want string }{
		// a URI quoted in a message
		{fmt.Sprintf("cannot fetch module %q: HTTP 404 Not Found", uri),
			`cannot fetch module "https://alice:xxxxx@h.example/x.wasm?sig=xxxxx&v=1": HTTP 404 Not Found`},
		// another URI (a redirect's) in the same text, and two URIs
		{`Get "https://b.s3/x?X-Amz-Signature=deadbeef": EOF; then ftp://t0k3n@h/y and https://ok/z`,
			`Get "https://b.s3/x?X-Amz-Signature=xxxxx": EOF; then ftp://xxxxx@h/y and https://ok/z`},
		// the credentials of a known URI without the URI around them
		{`registry "alice:hunter22@h.example" is invalid; signature "c2lnbmF0dXJl=" rejected`,
			`registry "alice:xxxxx@h.example" is invalid; signature "xxxxx" rejected`},
		{"no URI at all :// here", "no URI at all :// here"},
	} {
		if got := Text(tt.in, uri); got != tt.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
	}
	// a bearer query value and a fragment of a known URI, quoted without it
	frag := "https://h.example/x.wasm?Bearer=bearer-s3cret&v=2#frag-s3cret"
	in := `module "https://h.example/x.wasm?Bearer=bearer-s3cret&v=2#frag-s3cret": token "bearer-s3cret", anchor "frag-s3cret"`
	want := `module "https://h.example/x.wasm?Bearer=xxxxx&v=2#xxxxx": token "xxxxx", anchor "xxxxx"`
	if got := Text(in, frag); got != want {
		t.Errorf("Text(%q)\n = %q\nwant %q", in, got, want)
	}
	// short credentials are masked inside URIs but not everywhere
	if got := Text("a b c", "https://u:abc@h/x"); got != "a b c" {
		t.Errorf("short secret masked everywhere: %q", got)
	}
}

func TestError(t *testing.T) {
	base := fmt.Errorf("cannot fetch module %q: %w", "https://u:pass1234@h/x.wasm", fs.ErrNotExist)
	err := Error(base, "https://u:pass1234@h/x.wasm")
	if strings.Contains(err.Error(), "pass1234") || !strings.Contains(err.Error(), "u:xxxxx@h") {
		t.Errorf("Error: %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("errors.Is lost the chain")
	}
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

func FuzzURI(f *testing.F) {
	f.Add("https://user:pw@host/x.wasm?token=a&b=c#f")
	f.Add("registry://t@h/r:v")
	f.Fuzz(func(t *testing.T, s string) {
		out := URI(s)
		for _, sec := range Secrets(s) {
			if n := strings.Count(s, sec); n > 0 && strings.Count(out, sec) >= n {
				t.Fatalf("URI(%q) = %q keeps %q", s, out, sec)
			}
		}
		if strings.Contains(Text(out), "://") != strings.Contains(out, "://") {
			t.Fatalf("Text(%q) = %q", out, Text(out))
		}
	})
}

// BenchmarkText masks a typical fetch error against its module URI (what
// the server does once per failed load, and per error on GET /policies).
func BenchmarkText(b *testing.B) {
	uri := "https://alice:hunter22@h.example/x.wasm?X-Amz-Signature=abcdef&X-Amz-Date=20261127&v=1"
	msg := fmt.Sprintf("cannot fetch module %q: Get %q: dial tcp 10.0.0.1:443: connect: connection refused", uri, uri)
	for b.Loop() {
		Text(msg, uri)
	}
}

// BenchmarkURIPlain: a URI without credentials, the common case.
func BenchmarkURIPlain(b *testing.B) {
	for b.Loop() {
		URI("registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1")
	}
}
