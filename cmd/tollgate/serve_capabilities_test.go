package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// serve refuses a configuration that declares contextAwareResources when no
// Kubernetes client can be made (as Kubewarden's policy-server does), naming
// the policies and the flag to give.
func TestServeContextAwareNeedsACluster(t *testing.T) {
	dir := t.TempDir()
	pols := filepath.Join(dir, "policies.yml")
	mod := testfixture.Path("test/testdata/policies/namespace-label/policy.wasm")
	os.WriteFile(pols, []byte("ns:\n  module: file://"+mod+"\n  settings: {label: x}\n  contextAwareResources: [{apiVersion: v1, kind: Namespace}]\n"), 0o644)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "no-kubeconfig"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cmd := newServeCmd()
	cmd.SetArgs([]string{"--policies", pols, "--insecure-http", "--port", "0", "--readiness-probe-port", "0", "--cache-dir", filepath.Join(dir, "cache")})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "policies [ns] declare contextAwareResources, but there is no Kubernetes client") ||
		!strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("error %v", err)
	}
}
