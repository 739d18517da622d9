package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeDemo runs `tollgate serve --demo` with no configuration: the
// embedded example policies, a generated certificate, and the sample
// requests answered as the examples decide.
func TestServeDemo(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newServeCmd()
	var out, errOut lockedBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0", "--state-dir=" + dir + "/tls", "--cache-dir=" + dir + "/cache", "--demo"})
	cmd.SetContext(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	deadline := time.Now().Add(serveReadyCeiling)
	for !strings.Contains(out.String(), "Try it yourself") {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no demo output after %v\nstdout:\n%s\nstderr:\n%s", serveReadyCeiling, out.String(), errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	o := out.String()
	for _, want := range []string{
		`"uid":"demo-1","allowed":false`, `mandatory label \"owner\" is missing`,
		`"uid":"demo-2","allowed":true,"patchType":"JSONPatch","patch":`,
		`/validate_raw/raw-validation (a raw request by alice, expect accepted): HTTP 200`, `"allowed":true`,
		"--cacert " + dir + "/tls/ca.pem",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("demo output lacks %s:\n%s", want, o)
		}
	}
	if e := errOut.String(); !strings.Contains(e, "generated a self-signed certificate") || !strings.Contains(e, "embedded example policies") {
		t.Errorf("stderr:\n%s", e)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--workers=0", "--insecure-http"}, nil, "--workers=0"},
		{[]string{"--policies=/nonexistent.yml"}, nil, "--policies: open /nonexistent.yml"},
		{nil, map[string]string{"TOLLGATE_LOG_FMT": "xml"}, "--log-fmt=xml"},
		{nil, map[string]string{"TOLLGATE_PORT": "http"}, `TOLLGATE_PORT: value "http"`},
		{[]string{"--cert-file=/x.pem"}, nil, "--cert-file and --key-file go together"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cmd := newServeCmd()
			cmd.SetArgs(tt.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestServeSIGHUPReload: SIGHUP reloads policies.yml (with the file watch
// off, so only the signal can have done it); /policies shows the digest of
// the file served.
func TestServeSIGHUPReload(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	dir := t.TempDir()
	pfile := filepath.Join(dir, "policies.yml")
	first := []byte("labels:\n  module: builtin://examples/required-labels\n  settings: {mandatory_labels: [owner]}\n")
	second := []byte("labels2:\n  module: builtin://examples/required-labels\n  settings: {mandatory_labels: [team]}\n")
	os.WriteFile(pfile, first, 0o644)
	probe := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := serveInBackground(ctx, "--policies", pfile, "--watch=false", "--insecure-http", "--addr=127.0.0.1", "--port=0",
		"--readiness-probe-port="+strconv.Itoa(probe), "--cache-dir="+dir+"/cache", "--log-fmt=json")
	policies := func() string {
		_, body := probeGet(probe, "/policies")
		return body
	}
	waitFor := func(want string) {
		deadline := time.Now().Add(serveReadyCeiling)
		for !strings.Contains(policies(), want) {
			select {
			case err := <-done:
				t.Fatalf("serve exited: %v\n%s", err, out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("/policies never showed %s:\n%s\n%s", want, policies(), out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor(`"generation": 1`)
	waitFor(`"configDigest": "` + status.Digest(first) + `"`)
	os.WriteFile(pfile, second, 0o644)
	time.Sleep(300 * time.Millisecond)
	if strings.Contains(policies(), "labels2") {
		t.Fatal("reloaded without a signal although --watch=false")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(`"id": "labels2"`)
	waitFor(`"configDigest": "` + status.Digest(second) + `"`)
	// the file is adopted at once; the line comes once its policy loaded
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), `"msg":"configuration reloaded","trigger":"SIGHUP"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no JSON log line for the reload:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// serveInBackground runs `tollgate serve args` until ctx ends: its output goes to out, and what it
// returns to done.
func serveInBackground(ctx context.Context, args ...string) (out *lockedBuffer, done <-chan error) {
	cmd := newServeCmd()
	out = &lockedBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(args)
	cmd.SetContext(ctx)
	d := make(chan error, 1)
	go func() { d <- cmd.Execute() }()
	return out, d
}

// probeGet gets path on the probe port: the status code and body, or 0 and the error.
func probeGet(probe int, path string) (int, string) {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freePort is a loopback port that was free a moment ago and that freePort
// has not returned before in this test binary: the kernel may hand the same
// ephemeral port to two listeners opened and closed in a row, which made a
// test's --port and --readiness-probe-port equal.
func freePort(t testing.TB) int {
	freePorts.Lock()
	defer freePorts.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !freePorts.given[port] {
			freePorts.given[port] = true
			return port
		}
	}
}

var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

func TestServeDemoExit(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	dir := t.TempDir()
	cmd := newServeCmd()
	var out, errOut lockedBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0", "--state-dir=" + dir + "/tls", "--cache-dir=" + dir + "/cache", "--demo", "--demo-exit"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), `"uid":"demo-1","allowed":false`) {
		t.Fatalf("output:\n%s", out.String())
	}
}

// TestServeProbesWhileLoading: `tollgate serve` opens its probe port before the policies
// load, and serves each policy as soon as its own load ended. A policy's load is held (its
// module is fetched from a local HTTP server that answers only when the test says so, as a
// cold compilation of a big module takes tens of seconds): meanwhile /livez answers 200,
// /readiness 503 with how many policies are still loading, /policies lists the held one as
// loading, the other one answers on the webhook port and the held one answers 503; once it
// loads, /readiness is 200 and the policy serves. Before, nothing listened until every
// policy had loaded, and a kubelet's liveness probe killed the container in the middle of
// the load; then the webhook port stayed closed until the slowest policy had loaded.
func TestServeProbesWhileLoading(t *testing.T) {
	if len(demo.Names()) != 3 {
		t.Fatalf("embedded example modules: %v; run `make policies demo-modules`", demo.Names())
	}
	wasm := testfixture.Module(t, "examples/required-labels")
	requested, release := make(chan struct{}, 1), make(chan struct{})
	modules := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case requested <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(wasm)
	}))
	defer modules.Close()
	defer close(release) // before modules.Close, which waits for the held request
	host := strings.TrimPrefix(modules.URL, "http://")

	dir := t.TempDir()
	pfile, sources := filepath.Join(dir, "policies.yml"), filepath.Join(dir, "sources.yml")
	os.WriteFile(pfile, []byte("fast:\n  module: builtin://examples/required-labels\n  settings: {mandatory_labels: [owner]}\n"+
		"held:\n  module: "+modules.URL+"/policy.wasm\n  settings: {mandatory_labels: [owner]}\n"), 0o644)
	os.WriteFile(sources, []byte("insecure_sources: [\""+host+"\"]\n"), 0o644)
	port, probe := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := serveInBackground(ctx, "--policies", pfile, "--sources-path", sources, "--watch=false", "--insecure-http", "--addr=127.0.0.1",
		"--port="+strconv.Itoa(port), "--readiness-probe-port="+strconv.Itoa(probe), "--cache-dir="+dir+"/cache")
	get := func(path string) (int, string) { return probeGet(probe, path) }
	// waitFor polls path until it answers code with a body containing want.
	waitFor := func(path string, code int, want string) {
		t.Helper()
		deadline := time.Now().Add(serveReadyCeiling)
		for {
			c, body := get(path)
			if c == code && strings.Contains(body, want) {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("serve exited: %v\n%s", err, out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: HTTP %d %q, want %d with %q\n%s", path, c, body, code, want, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	select {
	case <-requested:
	case err := <-done:
		t.Fatalf("serve exited: %v\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the held module was never requested\n%s", out.String())
	}
	waitFor("/readiness", http.StatusServiceUnavailable, "loading: 1 of 2 policies")
	if code, body := get("/livez"); code != http.StatusOK {
		t.Fatalf("/livez while a policy loads: HTTP %d %q", code, body)
	}
	code, body := get("/policies")
	var pl status.Policies
	if err := json.Unmarshal([]byte(body), &pl); code != http.StatusOK || err != nil {
		t.Fatalf("/policies while a policy loads: HTTP %d %v %s", code, err, body)
	}
	states := map[string]string{}
	for _, p := range pl.Policies {
		states[p.ID] = p.State
	}
	if pl.Generation != 1 || states["held"] != status.StateLoading || states["fast"] != status.StateReady {
		t.Errorf("/policies while a policy loads: %s", body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "tollgate_config_policies_loading 1") {
		t.Errorf("/metrics while a policy loads: HTTP %d, no tollgate_config_policies_loading 1", code)
	}
	post := func(id string) (int, string) {
		rq := demo.Requests()[0] // a Pod without an owner label
		resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/validate/"+id, "application/json", strings.NewReader(rq.Body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := post("fast"); code != http.StatusOK || !strings.Contains(body, `mandatory label \"owner\" is missing`) {
		t.Errorf("/validate/fast while held loads: HTTP %d %s", code, body)
	}
	if code, body := post("held"); code != http.StatusServiceUnavailable || !strings.Contains(body, "still loading") {
		t.Errorf("/validate/held while it loads: HTTP %d %s", code, body)
	}

	release <- struct{}{}
	waitFor("/readiness", http.StatusOK, "ok")
	if code, body := post("held"); code != http.StatusOK || !strings.Contains(body, `mandatory label \"owner\" is missing`) {
		t.Errorf("/validate/held after the load: HTTP %d %s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
