package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
)

func runVerifyCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "tollgate", SilenceUsage: true, SilenceErrors: true}
	addOCIPersistentFlags(root)
	sc := &cobra.Command{Use: "scaffold"}
	sc.AddCommand(newScaffoldVerificationConfigCmd())
	root.AddCommand(newVerifyCmd(), sc)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// exitMessage is what main prints for err.
func exitMessage(err error) (int, string) {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, ee.msg
	}
	return 1, "Error: " + err.Error()
}

func TestVerifyCommand(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	dir := t.TempDir()
	common := []string{"--store-path", filepath.Join(dir, "store"), "--sources-path", reg.SourcesPath, "--docker-config-json-path", reg.DockerConfigPath}
	c, err := oci.NewClient(oci.Options{StorePath: filepath.Join(dir, "pushstore"), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
	if err != nil {
		t.Fatal(err)
	}
	push := func(tag string) (string, string) {
		uri := reg.URI("cli/verified:" + tag)
		d, err := c.Push(context.Background(), ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": tag}, 0), uri, oci.PushOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return uri, d
	}
	key := verifytest.NewKey(t)
	ss := verifytest.NewSigstore(t)
	keyed, keyedD := push("keyed")
	key.SignKey(t, verifytest.Digest(t, reg.Host, "cli/verified", keyedD), map[string]any{"env": "prod"})
	keyless, keylessD := push("keyless")
	ss.SignKeyless(t, verifytest.Digest(t, reg.Host, "cli/verified", keylessD),
		verifytest.Identity{URI: "https://github.com/acme/policies/.github/workflows/r.yml@refs/heads/main", Issuer: verify.GitHubIssuer, Repository: "acme/policies"},
		verifytest.KeylessOptions{})
	bundled, bundledD := push("bundled")
	ss.AttachBundle(t, verifytest.Digest(t, reg.Host, "cli/verified", bundledD), "dev@example.com", "https://id.example.com", "")
	unsigned, unsignedD := push("unsigned")

	ok := func(want string, args ...string) {
		t.Helper()
		out, errOut, err := runVerifyCmd(t, append(append([]string{"verify"}, args...), common...)...)
		if err != nil {
			_, msg := exitMessage(err)
			t.Fatalf("verify %s: %s\nstderr: %s", strings.Join(args, " "), msg, errOut)
		}
		if strings.TrimSpace(out) != want {
			t.Fatalf("verify %s printed %q, want the digest %s", strings.Join(args, " "), out, want)
		}
		if !strings.Contains(errOut, "satisfied: allOf[0]") {
			t.Errorf("stderr lacks the satisfied requirement: %q", errOut)
		}
	}
	fail := func(want []string, args ...string) {
		t.Helper()
		_, _, err := runVerifyCmd(t, append(append([]string{"verify"}, args...), common...)...)
		if err == nil {
			t.Fatalf("verify %s succeeded", strings.Join(args, " "))
		}
		code, msg := exitMessage(err)
		if code != 1 {
			t.Errorf("exit status %d, want 1", code)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("verify %s: message lacks %q:\n%s", strings.Join(args, " "), w, msg)
			}
		}
	}

	ok(keyedD, keyed, "-k", key.PublicPath)
	ok(keyedD, keyed, "-k", key.PublicPath, "-a", "env=prod")
	ok(keylessD, keyless, "--github-owner", "acme", "--github-repo", "policies", "--sigstore-trust-config", ss.TrustRootPath)
	ok(bundledD, bundled, "--cert-email", "dev@example.com", "--cert-oidc-issuer", "https://id.example.com", "--sigstore-trust-config", ss.TrustRootPath)

	cfg := filepath.Join(dir, "verification.yml")
	if err := os.WriteFile(cfg, []byte("apiVersion: v1\nanyOf:\n  minimumMatches: 1\n  signatures:\n  - {kind: genericIssuer, issuer: https://id.example.com, subject: {urlPrefix: https://nowhere.example.com}}\n  - {kind: githubAction, owner: acme}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runVerifyCmd(t, append([]string{"verify", keyless, "--verification-config-path", cfg, "--sigstore-trust-config", ss.TrustRootPath}, common...)...)
	if err != nil || strings.TrimSpace(out) != keylessD {
		t.Fatalf("verify with a config file: %q, %v", out, err)
	}

	fail([]string{"allOf[0] pubKey", "not satisfied", "not signed with this key"}, keyed, "-k", verifytest.NewKey(t).PublicPath)
	fail([]string{`annotation "env" is "prod", want "dev"`}, keyed, "-k", key.PublicPath, "-a", "env=dev")
	fail([]string{"allOf[0] githubAction owner \"evil\"", `is not owned by "evil"`}, keyless, "--github-owner", "evil", "--sigstore-trust-config", ss.TrustRootPath)
	fail([]string{verify.ErrUnsigned.Error(), unsignedD, ".sig"}, unsigned, "-k", key.PublicPath)
	fail([]string{"cannot be combined"}, keyed, "-k", key.PublicPath, "--verification-config-path", cfg)
	fail([]string{"--github-repo needs --github-owner"}, keyed, "--github-repo", "x")
	fail([]string{"--cert-email and --cert-oidc-issuer go together"}, keyed, "--cert-email", "a@b.c")
	fail([]string{"bad.yml", "allOf[0] (githubAction): owner: missing"}, keyed, "--verification-config-path", writeFile(t, dir, "bad.yml", "apiVersion: v1\nallOf: [{kind: githubAction}]\n"))
	fail([]string{"--sigstore-trust-config", "not JSON"}, keyless, "--github-owner", "acme", "--sigstore-trust-config", writeFile(t, dir, "root.json", "nope"))

	t.Run("scaffold", func(t *testing.T) {
		out, _, err := runVerifyCmd(t, "scaffold", "verification-config")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify.ParseConfig("scaffold", []byte(out)); err != nil || !strings.Contains(out, "owner: kubewarden") {
			t.Fatalf("scaffold output %q: %v", out, err)
		}
	})
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
