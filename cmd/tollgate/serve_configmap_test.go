package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestServePoliciesConfigMapFlag: --policies-configmap (or TOLLGATE_POLICIES_CONFIGMAP) must be
// NAMESPACE/NAME, and a kubeconfig that does not load is an error, not a silent file-only server.
func TestServePoliciesConfigMapFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--policies-configmap=nons"}, nil, "--policies-configmap=nons: invalid"},
		{nil, map[string]string{"TOLLGATE_POLICIES_CONFIGMAP": "a/b/c"}, "--policies-configmap=a/b/c: invalid"},
		{[]string{"--policies-configmap=ns/cm", "--kubeconfig=/nonexistent/kubeconfig"}, nil, "--policies-configmap: kubeconfig"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cmd := newServeCmd()
			cmd.SetArgs(append([]string{"--insecure-http", "--cache-dir=" + t.TempDir()}, tt.args...))
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}
