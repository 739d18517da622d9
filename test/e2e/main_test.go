package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
	"github.com/tollgate-dev/tollgate/test/e2e/kubelet"
)

// The shared environment: one etcd and kube-apiserver with tollgate's CRDs for every test of the
// package, and the tollgate binary. The operator test adds the controller and the kubelet.
var (
	env struct {
		cluster *cluster.Cluster
		root    string // repository root
		bin     string // tollgate
		dir     string // scratch: logs, pod directories
	}
	keep = flag.Bool("e2e.keep", false, "keep the scratch directory (logs) after the tests")
)

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var err error
	if env.root, err = kubelet.RepoRoot(); err != nil {
		return 1, err
	}
	if env.dir, err = os.MkdirTemp("", "tollgate-e2e-"); err != nil {
		return 1, err
	}
	defer func() {
		if *keep {
			fmt.Println("e2e: logs kept in", env.dir)
		} else {
			os.RemoveAll(env.dir)
		}
	}()
	if env.bin, err = kubelet.TollgateBinary(ctx, env.dir); err != nil {
		return 1, err
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	if err := os.MkdirAll(filepath.Join(env.dir, "cluster"), 0o755); err != nil {
		return 1, err
	}
	c, err := cluster.Start(ctx, cluster.Options{Logf: logf, Dir: filepath.Join(env.dir, "cluster"), KeepDir: true})
	if err != nil {
		return 1, err
	}
	env.cluster = c
	defer c.Stop()
	// tollgate's CRDs, as a user installs them.
	crds, err := filepath.Glob(filepath.Join(env.root, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return 1, fmt.Errorf("no CRD manifests in %s/crds (%v)", env.root, err)
	}
	args := []string{"apply", "--server-side"}
	for _, f := range crds {
		args = append(args, "-f", f)
	}
	if _, _, err := c.Kubectl(ctx, args...); err != nil {
		return 1, err
	}
	if _, _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		return 1, err
	}
	code := m.Run()
	if code != 0 {
		fmt.Println(c.LogTail(20))
	}
	return code, nil
}

// kubectlApply applies a manifest with the real kubectl; extra are more arguments (e.g.
// --dry-run=server).
func kubectlApply(ctx context.Context, manifest string, extra ...string) (string, error) {
	args := append([]string{"apply", "-f", "-"}, extra...)
	out, errOut, err := env.cluster.KubectlWithInput(ctx, strings.NewReader(manifest), args...)
	if err != nil {
		return out + errOut, err
	}
	return out, nil
}

func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
