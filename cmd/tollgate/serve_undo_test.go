package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestServeUndoWithoutRegistry: GET /policies names the manifest digest of each registry://
// module, and a policies.yml that pins a module served before to that digest (what `tollgate
// rollout undo` writes) loads from the store with the registry stopped, without trying it: no
// "registry unreachable" warning. It switches ten times between two pinned revisions and logs
// the time from the file's rename to /policies serving it (docs/benchmarks/operator.md).
func TestServeUndoWithoutRegistry(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	dir := t.TempDir()
	push := func(example, tag string) string {
		return strings.TrimSpace(mustExecute(t, "push", testfixture.Path("examples/"+example+"/policy.wasm"), reg.URI("undo:"+tag),
			"--store-path", filepath.Join(dir, "push-store"), "--sources-path", reg.SourcesPath))
	}
	testfixture.File(t, "examples/required-labels/policy.wasm")
	testfixture.File(t, "examples/capabilities-drop/policy.wasm")
	m1, m2 := push("required-labels", "v1"), push("capabilities-drop", "v2")
	var compact bytes.Buffer
	if err := json.Compact(&compact, testfixture.File(t, "examples/required-labels/testdata/settings.json")); err != nil {
		t.Fatal(err)
	}
	settings := compact.String()
	policiesPath := filepath.Join(dir, "policies.yml")
	write := func(module, settings string) string {
		t.Helper()
		doc := fmt.Sprintf("p:\n  module: %s\n", module)
		if settings != "" {
			doc += "  settings: " + settings + "\n"
		}
		tmp := policiesPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, policiesPath); err != nil {
			t.Fatal(err)
		}
		return status.Digest([]byte(doc))
	}
	write(reg.URI("undo:v1"), settings)
	url, stderr, _ := startServe(t, "--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0", "--insecure-http",
		"--policies="+policiesPath, "--sources-path="+reg.SourcesPath, "--cache-dir="+filepath.Join(dir, "cache"))
	probes := probesRE.FindStringSubmatch(stderr.String())[1]

	// served waits until /policies serves the file of digest with p current and returns p.
	served := func(digest string) (status.Policy, time.Duration) {
		t.Helper()
		start := time.Now()
		deadline := start.Add(2 * time.Minute) // a hang: a reload takes well under a second
		var last string
		for time.Now().Before(deadline) {
			resp, err := http.Get(probes + "/policies")
			if err == nil {
				var ps status.Policies
				err = json.NewDecoder(resp.Body).Decode(&ps)
				resp.Body.Close()
				if err == nil && ps.Serves(digest, "p") == nil {
					return ps.Policies[0], time.Since(start)
				}
				last = fmt.Sprintf("%+v", ps)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("policies.yml %s not served; last /policies: %s\n%s", digest, last, stderr.String())
		return status.Policy{}, 0
	}
	first, _ := served(status.Digest(mustRead(t, policiesPath)))
	if first.ManifestDigest != m1 || !strings.HasPrefix(first.Digest, "sha256:") || first.Digest == m1 {
		t.Fatalf("/policies: manifestDigest %q digest %q, want the manifest %s and the module's own digest", first.ManifestDigest, first.Digest, m1)
	}
	second, _ := served(write(reg.URI("undo:v2"), ""))
	if second.ManifestDigest != m2 || second.Digest == first.Digest {
		t.Fatalf("v2: %+v", second)
	}

	reg.Stop()
	review := testfixture.File(t, "examples/required-labels/testdata/review-pod-missing-label.json")
	var took []time.Duration
	for i := range 10 {
		module, s, want := reg.URI("undo:v1@"+m1), settings, first.Digest
		if i%2 == 1 {
			module, s, want = reg.URI("undo:v2@"+m2), "", second.Digest
		}
		p, d := served(write(module, s))
		if p.Digest != want {
			t.Fatalf("switch %d: serves %s, want %s", i, p.Digest, want)
		}
		took = append(took, d)
	}
	// The last switch went to v2; the verdict of v1 comes back with the next one.
	served(write(reg.URI("undo:v1@"+m1), settings))
	if code, body := postReview(t, url+"/validate/p", review); code != http.StatusOK || !strings.Contains(body, `"allowed":false`) || !strings.Contains(body, "owner") {
		t.Fatalf("/validate/p after the undo: %d %s", code, body)
	}
	if strings.Contains(stderr.String(), "registry unreachable") {
		t.Fatalf("a pinned module was asked of the stopped registry:\n%s", stderr.String())
	}
	slices.Sort(took)
	t.Logf("pinned switches with the registry stopped: p50 %v, max %v (10)", took[len(took)/2], took[len(took)-1])
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
