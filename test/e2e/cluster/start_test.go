package cluster_test

import (
	"errors"
	"strings"
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
