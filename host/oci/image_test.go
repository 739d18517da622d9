package oci

import (
	"errors"
	"testing"
)

func TestParseImage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"busybox", "registry://registry-1.docker.io/library/busybox:latest"},
		{"busybox:1.36", "registry://registry-1.docker.io/library/busybox:1.36"},
		{"bitnami/nginx:1", "registry://registry-1.docker.io/bitnami/nginx:1"},
		{"docker.io/library/alpine", "registry://registry-1.docker.io/library/alpine:latest"},
		{"ghcr.io/kubewarden/policies/pod-privileged:v0.2.1", "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.1"},
		{"localhost/x:1", "registry://localhost/x:1"},
		{"127.0.0.1:5000/x@sha256:" + sixtyFour, "registry://127.0.0.1:5000/x@sha256:" + sixtyFour},
	}
	for _, tt := range tests {
		ref, err := ParseImage(tt.in)
		if err != nil || ref.String() != tt.want {
			t.Errorf("ParseImage(%q) = %v, %v; want %s", tt.in, ref, err, tt.want)
		}
	}
	for _, bad := range []string{"", "registry://ghcr.io/x", "Upper/Case", "x:"} {
		if _, err := ParseImage(bad); !errors.Is(err, ErrMalformedReference) {
			t.Errorf("ParseImage(%q): %v, want ErrMalformedReference", bad, err)
		}
	}
}

const sixtyFour = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
