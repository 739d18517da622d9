package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// The shared environment: one real single-node cluster (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy, containerd, kubelet, a CNI bridge and a
// registry, see docs/e2e.md) with tollgate's CRDs for every test of the package, tollgate's image
// in the cluster's registry, and the tollgate binary for the tests that run it as a process.
var (
	env struct {
		cluster *cluster.Cluster
		root    string // repository root
		bin     string // tollgate
		dir     string // scratch: logs
		// image is tollgate's image as the node pulls it (`make image`, pushed to the registry).
		image string
		// otlp receives kube-apiserver's spans (--tracing-config-file; sampled only under a
		// sampled traceparent, so no other test makes any) and those of the tests' servers.
		otlp *otlptest.Receiver
	}
	keep = flag.Bool("e2e.keep", false, "keep the scratch directory (logs) after the tests")
)

// e2eImageTag is the tag tollgate's image is pushed under in the cluster's registry.
const e2eImageTag = "e2e"

// TestMain prepares what needs the machine's network (tools built from the Go module proxy, the
// tollgate binary, `make image`'s OCI layout) and then runs the tests inside the namespaces of
// cluster.Isolated, where the node lives and which the kernel tears down with it.
func TestMain(m *testing.M) {
	flag.Parse()
	if !cluster.InIsolation() {
		if err := prepare(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
	}
	os.Exit(cluster.Isolated(func() int {
		code, err := run(m)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			if code == 0 {
				code = 1
			}
		}
		return code
	}))
}

// prepare runs outside the namespaces: it finds or builds every binary and the image layout and
// passes their paths on in the environment (KUBE_APISERVER..., HELM, TOLLGATE_BIN,
// TOLLGATE_IMAGE_LAYOUT).
func prepare() error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute) // cold builds
	defer cancel()
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	if _, err := cluster.ResolveBinaries(ctx, cluster.Binaries{}, true, logf); err != nil { // HELM too
		return err
	}
	bin, err := tollgateBinary(ctx, root)
	if err != nil {
		return err
	}
	os.Setenv("TOLLGATE_BIN", bin)
	layout := os.Getenv("TOLLGATE_IMAGE_LAYOUT")
	if layout == "" {
		layout = filepath.Join(root, "bin", "image", "oci")
		if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
			logf("e2e: building tollgate's image (go run ./internal/tools/mkimage; make image does the same)")
			cmd := exec.CommandContext(ctx, "go", "run", "./internal/tools/mkimage", "-out", filepath.Join(root, "bin", "image"))
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("building the image: %w\n%s", err, out)
			}
		}
		os.Setenv("TOLLGATE_IMAGE_LAYOUT", layout)
	}
	// The pause image is built inside, offline: fetch what its build needs now.
	cmd := exec.CommandContext(ctx, "go", "mod", "download")
	cmd.Dir = filepath.Join(root, "test", "e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go mod download in test/e2e: %w\n%s", err, out)
	}
	return nil
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var err error
	if env.root, err = cluster.RepoRoot(); err != nil {
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
	env.bin = os.Getenv("TOLLGATE_BIN")
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	if err := os.MkdirAll(filepath.Join(env.dir, "cluster"), 0o755); err != nil {
		return 1, err
	}
	tracing, err := startTracingReceiver()
	if err != nil {
		return 1, err
	}
	defer env.otlp.Close()
	begin := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Logf: logf, Dir: filepath.Join(env.dir, "cluster"), KeepDir: true, Node: true,
		APIServerFlags: []string{"--tracing-config-file=" + tracing}})
	if err != nil {
		return 1, err
	}
	env.cluster = c
	defer c.Stop()
	// tollgate's image, as `make image` wrote it, in the cluster's registry.
	env.image = cluster.RegistryHost + "/tollgate:" + e2eImageTag
	digest, err := cluster.PushLayout(ctx, os.Getenv("TOLLGATE_IMAGE_LAYOUT"), env.image)
	if err != nil {
		return 1, err
	}
	fmt.Printf("e2e: cluster up: control plane %v, node Ready %v, image %s (%s) pushed; %v in all\n",
		c.StartDuration.Round(time.Millisecond), c.NodeStartDuration.Round(time.Millisecond), env.image, digest, time.Since(begin).Round(time.Millisecond))
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
	// The operator the TestOperator* tests share, when TestOperatorUninstall did not run.
	if err := releaseSharedOperator(); err != nil {
		fmt.Println("e2e: removing the TestOperator tests' operator:", err)
		code = max(code, 1)
	}
	if code != 0 {
		fmt.Println(c.LogTail(20))
	}
	return code, nil
}

// startTracingReceiver starts env.otlp and writes kube-apiserver's tracing configuration for it:
// no sampling of its own (samplingRatePerMillion 0), so only requests that come with a sampled
// traceparent are traced (TestTracingAcrossTheAPIServer).
func startTracingReceiver() (string, error) {
	rcv, err := otlptest.ListenGRPC("127.0.0.1:0")
	if err != nil {
		return "", err
	}
	env.otlp = rcv
	path := filepath.Join(env.dir, "tracing.yaml")
	cfg := "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: " + rcv.Addr() + "\nsamplingRatePerMillion: 0\n"
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// tollgateBinary returns $TOLLGATE_BIN, or builds cmd/tollgate into bin/ (go build's cache makes
// a second build quick).
func tollgateBinary(ctx context.Context, root string) (string, error) {
	if bin := os.Getenv("TOLLGATE_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("TOLLGATE_BIN: %w", err)
		}
		return abs, nil
	}
	out := filepath.Join(root, "bin", "tollgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/tollgate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tollgate: %w\n%s", err, b)
	}
	return out, nil
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
	begin := time.Now()
	deadline := begin.Add(timeout)
	var last error
	for {
		err := f()
		if err == nil {
			// A long wait is logged where it was made, so that the e2e log says where its time goes.
			if waited := time.Since(begin); waited >= 10*time.Second {
				t.Logf("waited %v (until then: %v)", waited.Round(100*time.Millisecond), last)
			}
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
