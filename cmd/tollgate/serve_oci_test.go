package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// startServe runs `tollgate serve` until the test ends and returns its webhook URL.
func startServe(t *testing.T, args ...string) (url string, stderr *lockedBuffer, stop func()) {
	t.Helper()
	return startServeUntil(t, regexp.MustCompile(`webhook=(http://127\.0\.0\.1:\d+)`), args...)
}

// startServeUntil runs `tollgate serve` until the test ends; it is ready
// when re's first group matches its standard error (the URL it returns) and
// its /readiness answers 200 (every policy loaded or failed: the webhook port
// serves each policy as soon as its own load ended).
func startServeUntil(t *testing.T, re *regexp.Regexp, args ...string) (url string, stderr *lockedBuffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr, done := serveInBackground(ctx, args...)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("serve did not stop")
			}
		})
	}
	t.Cleanup(stop)
	// Ready is an event (the line re matches, or serve exits): wait for it, polling the output.
	// Loading compiles every policy first, seconds each for a standard-Go module and far more on
	// a loaded two-core machine with a cold compilation cache (10 policies took over 90 s), so the
	// ceiling only catches a serve that hangs.
	deadline := time.Now().Add(serveReadyCeiling)
	for {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			p := probesRE.FindStringSubmatch(stderr.String())
			if p == nil {
				t.Fatalf("no probe address in the log:\n%s", stderr.String())
			}
			if resp, err := http.Get(p[1] + "/readiness"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return m[1], stderr, stop
				}
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\nstderr:\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after %v (a hang: loading takes far less even on a loaded machine)\nstderr:\n%s", serveReadyCeiling, stderr.String())
		}
	}
}

// serveReadyCeiling bounds the wait for serve to load its policies and listen: a hang, not a
// slow machine, is what it catches.
const serveReadyCeiling = 15 * time.Minute

// probesRE finds the probe port's URL in serve's "serving" log line (text or JSON).
var probesRE = regexp.MustCompile(`probes"?[=:]"?(http://127\.0\.0\.1:\d+)`)

func postReview(t *testing.T, url string, review []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeRegistryPolicies: serve's policies.yml names registry:// modules
// (pinned by digest, by tag, and one that does not exist) on a TLS registry
// with authentication. The existing ones evaluate; the missing one fails
// alone. After a restart with the registry down, the store serves the
// pinned module and, with a warning, the tagged one. The credentials come
// from --docker-config-json-path alone: $DOCKER_CONFIG names a folder
// without them, and serve leaves the process environment as it found it.
func TestServeRegistryPolicies(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	dir := t.TempDir()
	noCredentials := filepath.Join(dir, "no-docker-config")
	t.Setenv("DOCKER_CONFIG", noCredentials)
	policy := testfixture.Path("examples/required-labels/policy.wasm")
	testfixture.File(t, "examples/required-labels/policy.wasm")
	digest := strings.TrimSpace(mustExecute(t, "push", policy, reg.URI("examples/required-labels:v1"),
		"--store-path", filepath.Join(dir, "push-store"), "--sources-path", reg.SourcesPath, "--docker-config-json-path", reg.DockerConfigPath))
	settings := testfixture.File(t, "examples/required-labels/testdata/settings.json")
	policies := fmt.Sprintf(`pinned:
  module: %s
  settings: %s
tagged:
  module: %s
  settings: %s
missing:
  module: %s
`, reg.URI("examples/required-labels@"+digest), settings, reg.URI("examples/required-labels:v1"), settings, reg.URI("examples/missing:v1"))
	policiesPath := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(policiesPath, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0", "--insecure-http",
		"--policies=" + policiesPath, "--sources-path=" + reg.SourcesPath, "--docker-config-json-path=" + reg.DockerConfigPath,
		"--cache-dir=" + filepath.Join(dir, "cache"), "--state-dir=" + filepath.Join(dir, "state")}
	review := testfixture.File(t, "examples/required-labels/testdata/review-pod-missing-label.json")

	check := func(url string) {
		t.Helper()
		for _, id := range []string{"pinned", "tagged"} {
			code, body := postReview(t, url+"/validate/"+id, review)
			if code != http.StatusOK || !strings.Contains(body, `"allowed":false`) || !strings.Contains(body, `owner`) {
				t.Fatalf("/validate/%s: %d %s", id, code, body)
			}
		}
		if code, body := postReview(t, url+"/validate/missing", review); code == http.StatusOK && strings.Contains(body, `"allowed":true`) {
			t.Fatalf("/validate/missing accepted: %d %s", code, body)
		}
	}

	url, stderr, stop := startServe(t, args...)
	check(url)
	t.Logf("first start: %s", regexp.MustCompile(`msg="policies loaded"[^\n]*`).FindString(stderr.String()))
	if !strings.Contains(stderr.String(), "examples/missing:v1") {
		t.Fatalf("the failed pull is not reported:\n%s", stderr.String())
	}
	if got := os.Getenv("DOCKER_CONFIG"); got != noCredentials {
		t.Fatalf("serve changed the process environment: DOCKER_CONFIG=%q, want %q", got, noCredentials)
	}
	stop()

	// Restart with the registry down: the store serves both modules.
	reg.Stop()
	url, stderr, _ = startServe(t, args...)
	check(url)
	t.Logf("restart, registry down: %s", regexp.MustCompile(`msg="policies loaded"[^\n]*`).FindString(stderr.String()))
	if !strings.Contains(stderr.String(), "registry unreachable, using the module from the local store") {
		t.Fatalf("no store fallback warning:\n%s", stderr.String())
	}
}
