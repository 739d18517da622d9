package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestServeVerification: serve --verification-path loads the signed module
// (TinyGo's required-labels, signed with a cosign key), and refuses the
// unsigned one and the local file, each with its reason in /policies, while
// the signed one serves. A change of the verification file verifies the
// policies again without a restart: under a config naming another key the
// signed module stops serving (failed, not stale), and serves again when
// the config names its key. A reload that changes only the settings of the
// verified (now pinned) module loads it with the registry down: its
// verification is cached by digest and the module is in the store; a new
// module in the same reload fails alone.
func TestServeVerification(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	dir := t.TempDir()
	c, err := oci.NewClient(oci.Options{StorePath: filepath.Join(dir, "push-store"), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
	if err != nil {
		t.Fatal(err)
	}
	push := func(example, repo string) (string, string) {
		uri := reg.URI(repo + ":v1")
		d, err := c.Push(context.Background(), testfixture.File(t, "examples/"+example+"/policy.wasm"), uri, oci.PushOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return uri, d
	}
	signedURI, signedD := push("required-labels", "policies/signed")
	unsignedURI, _ := push("capabilities-drop", "policies/unsigned")
	key := verifytest.NewKey(t)
	key.SignKey(t, verifytest.Digest(t, reg.Host, "policies/signed", signedD), nil)

	key2 := verifytest.NewKey(t)
	verificationPoll = 100 * time.Millisecond
	t.Cleanup(func() { verificationPoll = 2 * time.Second })
	vcfg := filepath.Join(dir, "verification.yml")
	writeConfig := func(k *verifytest.Key) {
		pem := strings.ReplaceAll(strings.TrimSpace(string(k.PublicPEM)), "\n", "\n      ")
		if err := os.WriteFile(vcfg+".tmp", []byte("apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n      "+pem+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(vcfg+".tmp", vcfg); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(key)
	local := testfixture.Path("examples/capabilities-drop/policy.wasm")
	policies := filepath.Join(dir, "policies.yml")
	write := func(s string) {
		if err := os.WriteFile(policies+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(policies+".tmp", policies); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("signed:\n  module: %s\n  settings: {mandatory_labels: [owner]}\nunsigned:\n  module: %s\nlocal:\n  module: %s\n", signedURI, unsignedURI, local))

	probe := freePort(t)
	url, stderr, _ := startServe(t, "--addr=127.0.0.1", "--port=0", "--readiness-probe-port="+strconv.Itoa(probe), "--insecure-http",
		"--policies="+policies, "--sources-path="+reg.SourcesPath, "--docker-config-json-path="+reg.DockerConfigPath,
		"--cache-dir="+filepath.Join(dir, "cache"), "--state-dir="+filepath.Join(dir, "state"),
		"--verification-path="+vcfg)
	review := testfixture.File(t, "examples/required-labels/testdata/review-pod-missing-label.json")

	statusOf := func(gen int) map[string]status.Policy {
		t.Helper()
		deadline := time.Now().Add(serveReadyCeiling)
		for {
			_, body := probeGet(probe, "/policies")
			var ps status.Policies
			if json.Unmarshal([]byte(body), &ps) == nil && ps.Generation >= uint64(gen) {
				out := map[string]status.Policy{}
				settled := true // a configuration is adopted at once, its policies serve as they load
				for _, p := range ps.Policies {
					out[p.ID] = p
					settled = settled && !p.Loading && p.State != status.StateLoading
				}
				if settled {
					return out
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("/policies never reached generation %d: %s\n%s", gen, body, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	st := statusOf(1)
	if p := st["signed"]; p.State != status.StateReady {
		t.Fatalf("signed: %+v", p)
	}
	if p := st["unsigned"]; p.State != status.StateFailed || !strings.Contains(p.Error, "module is not signed") || !strings.Contains(p.Error, "verification failed") {
		t.Fatalf("unsigned: %+v", p)
	}
	if p := st["local"]; p.State != status.StateFailed || !strings.Contains(p.Error, "only registry:// modules") {
		t.Fatalf("local: %+v", p)
	}
	if code, body := postReview(t, url+"/validate/signed", review); code != http.StatusOK || !strings.Contains(body, `"allowed":false`) || !strings.Contains(body, "owner") {
		t.Fatalf("/validate/signed: %d %s", code, body)
	}
	if code, body := postReview(t, url+"/validate/unsigned", review); code == http.StatusOK && strings.Contains(body, `"allowed":true`) {
		t.Fatalf("/validate/unsigned accepted: %d %s", code, body)
	}

	// The verification config changes (as a ConfigMap volume does): the
	// policies are verified again without a restart. A module the new config
	// refuses stops serving: its previous version is not kept (not stale).
	writeConfig(key2)
	st = statusOf(2)
	if p := st["signed"]; p.State != status.StateFailed || p.Stale || !strings.Contains(p.Error, "not signed with this key") {
		t.Fatalf("signed under a config naming another key: %+v\n%s", p, stderr.String())
	}
	if code, body := postReview(t, url+"/validate/signed", review); code == http.StatusOK {
		t.Fatalf("/validate/signed still served under the new config: %d %s", code, body)
	}
	writeConfig(key)
	if p := statusOf(3)["signed"]; p.State != status.StateReady {
		t.Fatalf("signed, config back to its key: %+v", p)
	}

	// Reload with the registry down: the verified digest (pinned now, new
	// settings) needs neither the registry nor a new verification.
	reg.Stop()
	write(fmt.Sprintf("signed:\n  module: %s@%s\n  settings: {mandatory_labels: [team]}\nnew:\n  module: %s\n", signedURI, signedD, reg.URI("policies/new:v1")))
	st = statusOf(4)
	if p := st["signed"]; p.State != status.StateReady || p.Stale {
		t.Fatalf("signed after reload: %+v\n%s", p, stderr.String())
	}
	if p := st["new"]; p.State != status.StateFailed || !strings.Contains(p.Error, "registry unreachable") {
		t.Fatalf("new: %+v", p)
	}
	if code, body := postReview(t, url+"/validate/signed", review); code != http.StatusOK || !strings.Contains(body, "team") {
		t.Fatalf("/validate/signed after reload: %d %s", code, body)
	}
}

// TestServeVerificationBadConfig: a verification config that does not
// parse, or a trust root that cannot be read, stops serve at start.
func TestServeVerificationBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "v.yml", "apiVersion: v1\nallOf: [{kind: pubKey}]\n")
	good := writeFile(t, dir, "g.yml", "apiVersion: v1\nallOf: [{kind: githubAction, owner: acme}]\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--verification-path=" + bad}, "allOf[0] (pubKey): key: missing"},
		{[]string{"--verification-path=" + good, "--sigstore-trust-config=" + writeFile(t, dir, "r.json", "{}")}, "--sigstore-trust-config"},
		{[]string{"--sigstore-trust-config=" + filepath.Join(dir, "r.json")}, "--sigstore-trust-config goes with --verification-path"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, done := serveInBackground(ctx, append([]string{"--insecure-http", "--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0",
			"--cache-dir=" + filepath.Join(dir, "cache"), "--state-dir=" + filepath.Join(dir, "state")}, tc.args...)...)
		err := <-done
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: %v, want an error with %q\n%s", tc.args, err, tc.want, out.String())
		}
	}
}
