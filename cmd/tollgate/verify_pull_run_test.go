package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestVerifyingPullRunBench: pull, run and bench take verify's flags (as
// kwctl's do): a signed module satisfying them is pulled, run and benched;
// an unsigned one or one signed by another key is refused with the
// requirement that failed and is not stored; a local module with a
// verification flag is refused, not run unverified; the default config file
// turns verification on by itself (kwctl's behaviour), for registry modules.
func TestVerifyingPullRunBench(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{}) // verifytest writes signatures over plain HTTP
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config")) // no default config file yet
	if p := defaultVerificationConfigPath(); !strings.HasPrefix(p, dir) {
		t.Fatalf("default config path %s is not under XDG_CONFIG_HOME", p)
	}
	store := filepath.Join(dir, "store")
	common := []string{"--store-path", store, "--sources-path", reg.SourcesPath, "--docker-config-json-path", reg.DockerConfigPath}
	policy := testfixture.Path("examples/required-labels/policy.wasm")
	testfixture.File(t, "examples/required-labels/policy.wasm")
	push := func(tag string) (string, string) {
		uri := reg.URI("verified/required-labels:" + tag)
		return uri, strings.TrimSpace(mustExecute(t, append([]string{"push", policy, uri}, common...)...))
	}
	key := verifytest.NewKey(t)
	signed, signedD := push("signed")
	key.SignKey(t, verifytest.Digest(t, reg.Host, "verified/required-labels", signedD), nil)
	other := filepath.Join(dir, "other.wasm")
	if err := os.WriteFile(other, ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": "unsigned"}, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	unsigned := reg.URI("verified/unsigned:v1")
	mustExecute(t, append([]string{"push", other, unsigned}, common...)...)

	cli := func(args ...string) (string, string, error) {
		root := ociRoot()
		root.AddCommand(newRunCmd(), newBenchCmd())
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append(args, common...))
		err := root.ExecuteContext(context.Background())
		return out.String(), errOut.String(), err
	}
	refused := func(want string, args ...string) {
		t.Helper()
		_, _, err := cli(args...)
		if err == nil {
			t.Fatalf("tollgate %s succeeded, want it refused", strings.Join(args, " "))
		}
		if _, msg := exitMessage(err); !strings.Contains(msg, want) {
			t.Errorf("tollgate %s: %q lacks %q", strings.Join(args, " "), msg, want)
		}
	}
	runArgs := []string{"-r", testfixture.Path("examples/required-labels/testdata/pod-missing-label.json"),
		"-s", testfixture.Path("examples/required-labels/testdata/settings.json")}

	// pull
	out, errOut, err := cli("pull", signed, "-k", key.PublicPath, "-q")
	if err != nil {
		_, msg := exitMessage(err)
		t.Fatalf("pull -k of the signed module: %s", msg)
	}
	if !strings.Contains(out, signedD) || !strings.Contains(errOut, "satisfied: allOf[0]") {
		t.Errorf("pull -k printed %q / %q, want the digest %s and the satisfied requirement", out, errOut, signedD)
	}
	refused("not signed with this key", "pull", signed, "-k", verifytest.NewKey(t).PublicPath, "-q")
	refused(verify.ErrUnsigned.Error(), "pull", unsigned, "-k", key.PublicPath, "-q")
	if list := mustExecute(t, append([]string{"policies"}, common...)...); strings.Contains(list, "verified/unsigned") {
		t.Errorf("a refused pull stored the module:\n%s", list)
	}

	// run and bench
	out, _, err = cli(append([]string{"run", signed, "-k", key.PublicPath}, runArgs...)...)
	if err != nil || !strings.Contains(out, `"allowed":false`) {
		t.Fatalf("run -k of the signed module: %q %v", out, err)
	}
	refused("not signed with this key", append([]string{"run", signed, "-k", verifytest.NewKey(t).PublicPath}, runArgs...)...)
	refused(verify.ErrUnsigned.Error(), append([]string{"run", unsigned, "-k", key.PublicPath}, runArgs...)...)
	refused("only registry:// modules carry signatures", append([]string{"run", policy, "-k", key.PublicPath}, runArgs...)...)
	out, _, err = cli(append([]string{"bench", signed, "-k", key.PublicPath, "--count", "3", "--warmup", "0", "-o", "json"}, runArgs...)...)
	if err != nil || !strings.Contains(out, `"count": 3`) {
		t.Fatalf("bench -k of the signed module: %q %v", out, err)
	}
	refused(verify.ErrUnsigned.Error(), append([]string{"bench", unsigned, "-k", key.PublicPath, "--count", "3"}, runArgs...)...)

	// the default config file: verification without a flag, for registry modules only
	pub, err := os.ReadFile(key.PublicPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n" + indent(string(pub), "      ")
	if err := os.MkdirAll(filepath.Dir(defaultVerificationConfigPath()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(defaultVerificationConfigPath(), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	refused(verify.ErrUnsigned.Error(), append([]string{"run", unsigned}, runArgs...)...)
	if out, _, err := cli(append([]string{"run", signed}, runArgs...)...); err != nil || !strings.Contains(out, `"allowed":false`) {
		t.Fatalf("run of the signed module with the default config: %q %v", out, err)
	}
	if out, _, err := cli(append([]string{"run", policy}, runArgs...)...); err != nil || !strings.Contains(out, `"allowed":false`) {
		t.Fatalf("run of a local module with the default config (not verified, as kwctl): %q %v", out, err)
	}
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}
