package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
	probe, port := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := serveInBackground(ctx, "--policies", pfile, "--watch=false", "--insecure-http", "--addr=127.0.0.1",
		"--port="+strconv.Itoa(port), "--readiness-probe-port="+strconv.Itoa(probe), "--cache-dir="+dir+"/cache", "--log-fmt=json")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := probeGet(probe, "/readiness"); code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready:\n%s", out.String())
		}
	}
	resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/validate_raw/chatty", "application/json", strings.NewReader(`{"request":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, metrics := probeGet(probe, "/metrics")
	m := regexp.MustCompile(`tollgate_policy_log_lines_dropped_total\{policy="chatty"\} (\d+)`).FindStringSubmatch(metrics)
	logged := strings.Count(out.String(), `"msg":"chatty line","policy":"chatty","source":"policy","guest":{"policy":"other"}}`)
	if m == nil {
		t.Fatalf("HTTP %d; no dropped-lines metric:\n%s", resp.StatusCode, out.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 150 || n+logged != 300 {
		t.Errorf("300 lines: %d logged, %s counted as dropped", logged, m[1])
	}
	cancel()
	<-done
}
