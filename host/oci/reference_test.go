package oci_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci"
)

const dig = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"

func TestParseURI(t *testing.T) {
	tests := []struct {
		name    string
		uri     string
		want    oci.Reference
		wantErr error
		errHas  string
	}{
		{"tag", "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1",
			oci.Reference{Registry: "ghcr.io", Repository: "kubewarden/policies/pod-privileged", Tag: "v0.2.1"}, nil, ""},
		{"port and tag", "registry://127.0.0.1:5000/p:1.0",
			oci.Reference{Registry: "127.0.0.1:5000", Repository: "p", Tag: "1.0"}, nil, ""},
		{"default tag", "registry://localhost:5000/a/b",
			oci.Reference{Registry: "localhost:5000", Repository: "a/b", Tag: "latest"}, nil, ""},
		{"digest", "registry://ghcr.io/a/b@" + dig,
			oci.Reference{Registry: "ghcr.io", Repository: "a/b", Digest: dig}, nil, ""},
		{"tag and digest", "registry://ghcr.io:443/a/b:v1@" + dig,
			oci.Reference{Registry: "ghcr.io:443", Repository: "a/b", Tag: "v1", Digest: dig}, nil, ""},
		{"https scheme", "https://ghcr.io/a/b:v1", oci.Reference{}, oci.ErrUnknownScheme, `"https://"`},
		{"no scheme", "ghcr.io/a/b:v1", oci.Reference{}, oci.ErrUnknownScheme, "no scheme"},
		{"empty", "registry://", oci.Reference{}, oci.ErrMalformedReference, "empty"},
		{"no repo", "registry://ghcr.io", oci.Reference{}, oci.ErrMalformedReference, "missing repository"},
		{"no repo slash", "registry://ghcr.io/", oci.Reference{}, oci.ErrMalformedReference, "missing repository"},
		{"upper repo", "registry://ghcr.io/A/b:v1", oci.Reference{}, oci.ErrMalformedReference, `invalid repository "A/b"`},
		{"empty tag", "registry://ghcr.io/a/b:", oci.Reference{}, oci.ErrMalformedReference, "empty tag"},
		{"bad tag", "registry://ghcr.io/a/b:-x", oci.Reference{}, oci.ErrMalformedReference, `invalid tag "-x"`},
		{"short digest", "registry://ghcr.io/a/b@sha256:abc", oci.Reference{}, oci.ErrMalformedReference, `digest "sha256:abc"`},
		{"sha512", "registry://ghcr.io/a/b@sha512:abc", oci.Reference{}, oci.ErrMalformedReference, "must start with sha256:"},
		{"space", "registry://ghcr.io/a b:v1", oci.Reference{}, oci.ErrMalformedReference, "whitespace"},
		{"bad host", "registry://gh[cr.io/a:v1", oci.Reference{}, oci.ErrMalformedReference, "invalid registry host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := oci.ParseURI(tt.uri)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseURI(%q) error = %v, want %v", tt.uri, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.errHas) || !strings.Contains(err.Error(), tt.uri) {
					t.Fatalf("error %q should name %q and contain %q", err, tt.uri, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURI(%q): %v", tt.uri, err)
			}
			if got != tt.want {
				t.Fatalf("ParseURI(%q) = %+v, want %+v", tt.uri, got, tt.want)
			}
			// String round-trips (with the default tag made explicit).
			again, err := oci.ParseURI(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip %q -> %q: %+v, %v", tt.uri, got.String(), again, err)
			}
		})
	}
}

func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"registry://a.io/b:c", "registry://h:1/x/y@" + dig, "registry://", "https://x/y", "registry://a/b:c@sha256:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := oci.ParseURI(s)
		if err != nil {
			return
		}
		again, err := oci.ParseURI(ref.String())
		if err != nil {
			t.Fatalf("%q parsed to %+v whose String %q does not parse: %v", s, ref, ref.String(), err)
		}
		if again != ref {
			t.Fatalf("%q: %+v != %+v", s, again, ref)
		}
	})
}

// TestParseURICredentials: a registry:// URI with credentials is refused
// with an error that names the URI with them masked and says where
// credentials go.
func TestParseURICredentials(t *testing.T) {
	for _, uri := range []string{"registry://robot:hunter2@ghcr.io/a/b:v1", "registry://ghp_token1@ghcr.io/a/b:v1"} {
		_, err := oci.ParseURI(uri)
		if !errors.Is(err, oci.ErrMalformedReference) || !strings.Contains(err.Error(), "docker login") {
			t.Fatalf("ParseURI(%q): %v", uri, err)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ghp_token1") || !strings.Contains(err.Error(), "xxxxx@ghcr.io/a/b:v1") {
			t.Errorf("ParseURI(%q): %v", uri, err)
		}
	}
}
