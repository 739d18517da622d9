package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- {name: a, cluster: {server: "https://a.example:6443"}}
- {name: b, cluster: {server: "https://b.example:6443"}}
users:
- {name: u, user: {token: t}}
contexts:
- {name: ca, context: {cluster: a, user: u}}
- {name: cb, context: {cluster: b, user: u}}
current-context: ca
`

func TestConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster
	f := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ctx, want string }{{"", "https://a.example:6443"}, {"cb", "https://b.example:6443"}} {
		c, err := Config(f, tc.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Host != tc.want {
			t.Errorf("context %q: host %q, want %q", tc.ctx, c.Host, tc.want)
		}
	}
	t.Setenv("KUBECONFIG", f)
	if c, err := Config("", ""); err != nil || c.Host != "https://a.example:6443" {
		t.Errorf("$KUBECONFIG: %v, %v", c, err)
	}
	if _, err := Config(f, "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown context: %v", err)
	}
}
