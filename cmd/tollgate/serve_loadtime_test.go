package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// tollgateBinary builds this command once per test run (`go build`), for the tests that
// need the real process: signals, exit, its memory. TOLLGATE_TEST_BIN names another build to
// run them against instead, e.g. an older commit's, to show that a test fails there.
func tollgateBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if bin := os.Getenv("TOLLGATE_TEST_BIN"); bin != "" {
			binPath = bin
			if _, err := os.Stat(bin); err != nil {
				binErr = fmt.Errorf("TOLLGATE_TEST_BIN: %v", err)
			}
			return
		}
		dir, err := os.MkdirTemp("", "tollgate-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "tollgate")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// serveProcess is `tollgate serve` running as a process of its own.
type serveProcess struct {
	t           testing.TB
	cmd         *exec.Cmd
	out         *lockedBuffer
	port, probe int
	pfile       string // its policies.yml
	exited      chan struct{}
	started     time.Time // its exec
}

func startServeProcess(t *testing.T, policies string, args ...string) *serveProcess {
	t.Helper()
	return startServeProcessOn(t, policies, []string{"--insecure-http"}, args...)
}

// startServeProcessOn is startServeProcess with the webhook's TLS flags (or --insecure-http) in
// listen; started is the time of its exec.
func startServeProcessOn(t testing.TB, policies string, listen []string, args ...string) *serveProcess {
	t.Helper()
	dir := t.TempDir()
	pfile := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(pfile, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{t: t, out: &lockedBuffer{}, port: freePort(t), probe: freePort(t), pfile: pfile, exited: make(chan struct{})}
	base := append([]string{"serve", "--policies", pfile}, listen...)
	p.cmd = exec.Command(tollgateBinary(t), append(append(base, "--addr=127.0.0.1",
		"--port="+strconv.Itoa(p.port), "--readiness-probe-port="+strconv.Itoa(p.probe), "--cache-dir="+dir+"/cache"), args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("serve output:\n%s", p.out.String())
		}
	})
	return p
}

// post sends the sample Pod without an owner label to id: the status code and body (0 and
// the error when there is no answer).
func (p *serveProcess) post(id string) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://127.0.0.1:"+strconv.Itoa(p.port)+"/validate/"+id, "application/json", strings.NewReader(demo.Requests()[0].Body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// until polls f every 100 ms until it returns "" and returns how long that took, or fails
// the test after limit (or when the process exits) with f's last answer.
func (p *serveProcess) until(what string, limit time.Duration, f func() string) time.Duration {
	p.t.Helper()
	start := time.Now()
	for {
		msg := f()
		if msg == "" {
			return time.Since(start)
		}
		select {
		case <-p.exited:
			p.t.Fatalf("%s: serve exited (%v)", what, p.cmd.ProcessState)
		default:
		}
		if time.Since(start) > limit {
			p.t.Fatalf("%s: not within %v: %s", what, limit, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// policies is GET /policies.
func (p *serveProcess) policies() (status.Policies, error) {
	code, body := probeGet(p.probe, "/policies")
	var pl status.Policies
	if err := json.Unmarshal([]byte(body), &pl); code != 200 || err != nil {
		return pl, fmt.Errorf("GET /policies: HTTP %d %v", code, err)
	}
	return pl, nil
}

// policy is id's entry of GET /policies.
func (p *serveProcess) policy(id string) (status.Policy, error) {
	pl, err := p.policies()
	if err != nil {
		return status.Policy{}, err
	}
	for _, q := range pl.Policies {
		if q.ID == id {
			return q, nil
		}
	}
	return status.Policy{}, fmt.Errorf("no policy %s in /policies", id)
}

// terminate sends SIGTERM and returns how long the process took to exit (failing past limit).
func (p *serveProcess) terminate(limit time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return time.Since(start)
	case <-time.After(limit):
		p.t.Fatalf("serve still running %v after SIGTERM", limit)
		return 0
	}
}

// rssPeak is the process's peak resident memory (VmHWM), in bytes.
func (p *serveProcess) rssPeak() int64 { return p.memory("VmHWM") }

// memory is a memory field of the process's /proc status (VmRSS, VmHWM...) in bytes, -1 if it
// cannot be read.
func (p *serveProcess) memory(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

const healthyPolicy = "healthy:\n  module: builtin://examples/required-labels\n  settings: {mandatory_labels: [owner]}\n"

func writeModule(t *testing.T, name string, b []byte) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeStuckLoad runs the real binary with a healthy policy beside a module whose Wasm
// `start` function loops forever: the healthy policy answers while the other one loads
// (503 for it), SIGTERM ends the process within --shutdown-timeout with the load still
// running, and with a short --policy-load-timeout the looping policy is failed with the
// reason. Before, the webhook port never opened, and SIGTERM did not end the process.
func TestServeStuckLoad(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	loop := writeModule(t, "start-loop.wasm", hostile.StartLoop())
	policies := healthyPolicy + "loop:\n  module: " + loop + "\n"

	t.Run("SIGTERM while loading", func(t *testing.T) {
		p := startServeProcess(t, policies, "--policy-load-timeout=10m", "--shutdown-timeout=5s", "--shutdown-delay=0s")
		took := p.until("healthy answers", 30*time.Second, func() string {
			if code, body := p.post("healthy"); code != 200 || !strings.Contains(body, `\"owner\" is missing`) {
				return fmt.Sprintf("HTTP %d %.200s", code, body)
			}
			return ""
		})
		t.Logf("healthy answered %v after start", took)
		if q, err := p.policy("loop"); err != nil || (q.State != status.StateLoading && q.State != status.StateFailed) {
			t.Errorf("loop: %+v %v", q, err)
		}
		if code, _ := probeGet(p.probe, "/readiness"); code == 200 {
			if q, _ := p.policy("loop"); q.State == status.StateLoading {
				t.Error("/readiness 200 with a policy still loading")
			}
		}
		t.Logf("exited %v after SIGTERM", p.terminate(15*time.Second))
	})

	t.Run("failed at the load deadline", func(t *testing.T) {
		// The looping start gets a start timeout of 10 minutes (its timeoutEvalSeconds), so
		// that the load deadline is what fails it; the deadline leaves the healthy policy 45 s
		// to load on a loaded machine (5 s was not enough with two CPU-bound processes beside
		// the test at load 23).
		policies := healthyPolicy + "loop:\n  module: " + loop + "\n  timeoutEvalSeconds: 600\n"
		p := startServeProcess(t, policies, "--policy-load-timeout=45s", "--shutdown-timeout=5s", "--shutdown-delay=0s")
		took := p.until("loop failed", 3*time.Minute, func() string {
			q, err := p.policy("loop")
			if err != nil || q.State != status.StateFailed || q.Error == "" {
				return fmt.Sprintf("%+v %v", q, err)
			}
			return ""
		})
		q, _ := p.policy("loop")
		t.Logf("loop failed %v after start: %s", took, q.Error)
		if !strings.Contains(q.Error, "not loaded within 45s (--policy-load-timeout)") {
			t.Errorf("loop failed for another reason than its load deadline: %s", q.Error)
		}
		if code, body := p.post("healthy"); code != 200 {
			t.Errorf("healthy: HTTP %d %.200s", code, body)
		}
		if code, body := p.post("loop"); code != 500 {
			t.Errorf("loop once failed: HTTP %d %.200s", code, body)
		}
		if code, body := probeGet(p.probe, "/readiness"); code != 200 {
			t.Errorf("/readiness once every policy settled: HTTP %d %q", code, body)
		}
		t.Logf("exited %v after SIGTERM", p.terminate(15*time.Second))
	})
}

// TestServeStartsOnEmptyPolicies: `tollgate serve` started while policies.yml is empty (an
// editor truncated it and has not written it yet) neither serves nothing nor exits: /livez
// answers 200 and /readiness 503 with the error until the file has content, and then the
// policies load and serve. Before, the empty file was taken as "no policies": ready, and 404
// for every policy.
func TestServeStartsOnEmptyPolicies(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	dir := t.TempDir()
	pfile := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(pfile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	port, probe := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := serveInBackground(ctx, "--policies", pfile, "--insecure-http", "--addr=127.0.0.1",
		"--port="+strconv.Itoa(port), "--readiness-probe-port="+strconv.Itoa(probe), "--cache-dir="+dir+"/cache")
	wait := func(what string, f func() string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			msg := f()
			if msg == "" {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("%s: serve exited: %v\n%s", what, err, out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s\n%s", what, msg, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait("/readiness says the file is empty", func() string {
		if code, body := probeGet(probe, "/readiness"); code != 503 || !strings.Contains(body, "empty") || !strings.Contains(body, "{}") {
			return fmt.Sprintf("HTTP %d %q", code, body)
		}
		return ""
	})
	if code, body := probeGet(probe, "/livez"); code != 200 {
		t.Errorf("/livez while waiting: HTTP %d %q", code, body)
	}
	time.Sleep(time.Second) // still waiting, not serving nothing
	if code, _ := probeGet(probe, "/readiness"); code != 503 {
		t.Fatalf("/readiness with an empty file: HTTP %d", code)
	}
	if err := os.WriteFile(pfile, []byte(healthyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	wait("/readiness once the file has content", func() string {
		if code, body := probeGet(probe, "/readiness"); code != 200 {
			return fmt.Sprintf("HTTP %d %q", code, body)
		}
		return ""
	})
	resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/validate/healthy", "application/json", strings.NewReader(demo.Requests()[0].Body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/validate/healthy: HTTP %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeEmptiedPoliciesFile: policies.yml emptied in place (`: > policies.yml`, or an editor
// that truncates before it writes) and a reload (SIGHUP here; the file watcher does the same)
// keep the last good configuration serving: the reload is reported rejected in /policies with
// the reason, the policy still answers. Before (checked with 6bd8156's binary through
// TOLLGATE_TEST_BIN), the empty file was adopted as "no policies": the reload was reported ok
// and the policy answered 404.
func TestServeEmptiedPoliciesFile(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	p := startServeProcess(t, healthyPolicy)
	p.until("healthy answers", 2*time.Minute, func() string {
		if code, body := p.post("healthy"); code != 200 {
			return fmt.Sprintf("HTTP %d %.200s", code, body)
		}
		return ""
	})
	if err := os.WriteFile(p.pfile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var pl status.Policies
	p.until("the emptied file's reload reported", time.Minute, func() string {
		var err error
		if pl, err = p.policies(); err != nil {
			return err.Error()
		}
		if pl.LastReload.Trigger == "start" || (pl.LastReload.OK && len(pl.Policies) > 0) {
			return fmt.Sprintf("last reload %+v, %d policies", pl.LastReload, len(pl.Policies))
		}
		return ""
	})
	if pl.LastReload.OK || !strings.Contains(pl.LastReload.Error, "empty policies file") {
		t.Errorf("the emptied file's reload: %+v, want rejected as an empty policies file", pl.LastReload)
	}
	if code, body := p.post("healthy"); code != 200 {
		t.Errorf("healthy after the emptied file's reload: HTTP %d %.200s", code, body)
	}
}
