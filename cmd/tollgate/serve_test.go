package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
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
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "Try it yourself") {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no demo output after 60s\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
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
	cmd := newServeCmd()
	var out lockedBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--policies", pfile, "--watch=false", "--insecure-http", "--addr=127.0.0.1", "--port=0",
		"--readiness-probe-port=" + strconv.Itoa(probe), "--cache-dir=" + dir + "/cache", "--log-fmt=json"})
	cmd.SetContext(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	policies := func() string {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + "/policies")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(want string) {
		deadline := time.Now().Add(30 * time.Second)
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
	if !strings.Contains(out.String(), `"msg":"configuration reloaded","trigger":"SIGHUP"`) {
		t.Errorf("no JSON log line for the reload:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

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
