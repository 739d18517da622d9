package serve

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
)

// TestOCICapabilitiesWithVerification: the oci host capabilities answer
// through the registry client with --verification-path as without it, as
// Kubewarden's policy-server's do (its callback handler is given the sources
// and the Sigstore trust root, never the verification config): the
// verification config decides which modules load, not which images a policy
// may look up. Against a real registry, serve's own assembly (newModules,
// withCapabilities) answers oci/v1/manifest_digest with the image's digest.
func TestOCICapabilitiesWithVerification(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	dir := t.TempDir()
	c, err := oci.NewClient(oci.Options{StorePath: filepath.Join(dir, "push-store"), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	digest, err := c.Push(ctx, ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": "t"}, 0), reg.URI("img/app:1"), oci.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(reg.SourcesPath)
	if err != nil {
		t.Fatal(err)
	}
	src, err := config.ParseSources(reg.SourcesPath, data)
	if err != nil {
		t.Fatal(err)
	}
	key := verifytest.NewKey(t)
	vcfg := filepath.Join(dir, "verification.yml")
	pem := strings.ReplaceAll(strings.TrimSpace(string(key.PublicPEM)), "\n", "\n      ")
	if err := os.WriteFile(vcfg, []byte("apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n      "+pem+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, verification := range []string{"", vcfg} {
		o := Options{Logger: slog.New(slog.DiscardHandler), VerificationPath: verification,
			Config:     config.Options{SourcesPath: reg.SourcesPath, DockerConfigJSONPath: reg.DockerConfigPath, CacheDir: filepath.Join(dir, "cache")},
			Kubeconfig: filepath.Join(dir, "no-kubeconfig")} // no Kubernetes client: not needed here
		cfg := &config.Config{Sources: src}
		m, err := newModules(o, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if (m.verification != nil) != (verification != "") {
			t.Fatalf("--verification-path=%q: verification %v", verification, m.verification)
		}
		stop, err := withCapabilities(o, m, &server.Options{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.loader.HostCalls("p", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h(ctx, "kubewarden", "oci", "v1/manifest_digest", []byte(`"`+reg.Host+`/img/app:1"`))
		stop()
		if want := `{"digest":"` + digest + `"}`; err != nil || string(out) != want {
			t.Errorf("--verification-path=%q: oci/v1/manifest_digest = %s, %v; want %s", verification, out, err, want)
		}
	}
}
