package cluster_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// A kube-apiserver that cannot start fails Start with the tail of its log, and leaves nothing
// running.
func TestStartReportsAPIServerLog(t *testing.T) {
	_, err := cluster.Start(t.Context(), cluster.Options{
		Logf:           t.Logf,
		APIServerFlags: []string{"--no-such-flag=1"},
		StartTimeout:   30 * time.Second,
	})
	if err == nil {
		t.Fatal("Start succeeded with an unknown kube-apiserver flag")
	}
	for _, want := range []string{"kube-apiserver exited before it was ready", "kube-apiserver.log", "unknown flag: --no-such-flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A binary named in the environment that does not exist is a clear error, not a skip.
func TestStartMissingBinary(t *testing.T) {
	t.Setenv("ETCD", "/nonexistent/etcd")
	_, err := cluster.Start(t.Context(), cluster.Options{Logf: t.Logf})
	if !errors.Is(err, cluster.ErrMissingBinary) || !strings.Contains(err.Error(), "/nonexistent/etcd") {
		t.Fatalf("Start: %v; want ErrMissingBinary naming /nonexistent/etcd", err)
	}
}

// A port taken between the harness's check and kube-apiserver's bind makes Start try other ports;
// here the port is forced (a flag overriding --secure-port), so every attempt fails the same way.
func TestStartRetriesTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var retries atomic.Int32
	_, err = cluster.Start(t.Context(), cluster.Options{
		Logf: func(format string, args ...any) {
			if strings.Contains(format, "retrying") {
				retries.Add(1)
			}
			t.Logf(format, args...)
		},
		APIServerFlags: []string{"--secure-port=" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)},
		StartTimeout:   30 * time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a taken port: %v; want address already in use", err)
	}
	if retries.Load() != 2 {
		t.Errorf("%d retries, want 2", retries.Load())
	}
}
