package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// served is a `tollgate serve` process started by startServe.
type served struct {
	// base is the webhook's URL (plain HTTP), probe the probe port's (readiness, metrics).
	base, probe string
	pid         int
	logs        *bytes.Buffer
}

// startServe runs `tollgate serve --policies POLICIES --kubeconfig` (plain HTTP on loopback, the
// shared compilation cache) with extra arguments, waits until it is ready, and stops it when the
// test ends, printing its log if the test failed.
func startServe(tb testing.TB, ctx context.Context, policies string, extra ...string) *served {
	tb.Helper()
	port, probe := freePort(tb), freePort(tb)
	logs := &bytes.Buffer{}
	args := append([]string{"serve", "--policies", policies, "--insecure-http", "--addr", "127.0.0.1",
		"--port", fmt.Sprint(port), "--readiness-probe-port", fmt.Sprint(probe), "--kubeconfig", env.cluster.Kubeconfig,
		"--cache-dir", filepath.Join(env.dir, "wasm-cache")}, extra...)
	srv := exec.CommandContext(ctx, env.bin, args...)
	srv.Stdout, srv.Stderr = logs, logs
	if err := srv.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
		if tb.Failed() {
			tb.Logf("serve log:\n%s", logs.String())
		}
	})
	s := &served{base: fmt.Sprintf("http://127.0.0.1:%d", port), probe: fmt.Sprintf("http://127.0.0.1:%d", probe), pid: srv.Process.Pid, logs: logs}
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() error {
		resp, err := http.Get(s.probe + "/readiness")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readiness %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		tb.Fatalf("tollgate serve not ready: %v\n%s", err, logs.String())
	}
	return s
}
