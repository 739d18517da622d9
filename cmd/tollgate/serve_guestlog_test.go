package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestServeGuestLogs: through `tollgate serve`, a policy's log lines carry
// its real id with its own fields in the group "guest", and the lines above
// its rate limit are counted in tollgate_policy_log_lines_dropped_total.
func TestServeGuestLogs(t *testing.T) {
	dir := t.TempDir()
	pfile := filepath.Join(dir, "policies.yml")
	os.WriteFile(pfile, []byte(fmt.Sprintf(`chatty:
  module: %s
  settings: {behaviour: hostcall, namespace: tracing, operation: log, repeat: 300,
    payload: {level: info, message: chatty line, policy: other}}
`, testfixture.Path("test/testdata/policies/misbehave/policy.wasm"))), 0o644)
	probe := freePort(t)
	webhook, out, stop := startServeUntil(t, regexp.MustCompile(`"webhook":"(http://127\.0\.0\.1:\d+)"`), "--policies", pfile, "--watch=false",
		"--insecure-http", "--addr=127.0.0.1", "--port=0", "--readiness-probe-port="+strconv.Itoa(probe), "--cache-dir="+dir+"/cache", "--log-fmt=json")
	resp, err := http.Post(webhook+"/validate_raw/chatty", "application/json", strings.NewReader(`{"request":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, metrics := probeGet(probe, "/metrics")
	stop()
	m := regexp.MustCompile(`tollgate_policy_log_lines_dropped_total\{policy="chatty"\} (\d+)`).FindStringSubmatch(metrics)
	logged := strings.Count(out.String(), `"msg":"chatty line","policy":"chatty","source":"policy","guest":{"policy":"other"}}`)
	if m == nil {
		t.Fatalf("HTTP %d; no dropped-lines metric:\n%s", resp.StatusCode, out.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 150 || n+logged != 300 {
		t.Errorf("300 lines: %d logged, %s counted as dropped", logged, m[1])
	}
}
