package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrMissingBinary is returned (wrapped) when a control-plane binary cannot be found or built.
var ErrMissingBinary = errors.New("control-plane binary missing")

// installScript is the script, relative to the repository root, that builds the binaries.
const installScript = "scripts/install-k8s-tools.sh"

// Binaries are the paths of the control-plane binaries.
type Binaries struct {
	KubeAPIServer string
	Etcd          string
	Kubectl       string
}

// resolveBinaries fills what b lacks from the environment (KUBE_APISERVER, ETCD, KUBECTL), then
// from scripts/install-k8s-tools.sh, which builds what is missing (kube-apiserver takes minutes the
// first time on a machine) and prints name=path lines.
func resolveBinaries(ctx context.Context, b Binaries, logf func(string, ...any)) (Binaries, error) {
	fields := []struct {
		tool, env string
		path      *string
	}{
		{"kube-apiserver", "KUBE_APISERVER", &b.KubeAPIServer},
		{"etcd", "ETCD", &b.Etcd},
		{"kubectl", "KUBECTL", &b.Kubectl},
	}
	var missing []string
	for _, f := range fields {
		if *f.path == "" {
			*f.path = os.Getenv(f.env)
		}
		if *f.path == "" {
			missing = append(missing, f.tool)
		}
	}
	if len(missing) > 0 {
		paths, err := runInstallScript(ctx, missing, logf)
		if err != nil {
			return b, err
		}
		for _, f := range fields {
			if *f.path == "" {
				*f.path = paths[f.tool]
			}
		}
	}
	for _, f := range fields {
		if *f.path == "" {
			return b, fmt.Errorf("cluster: %w: %s (set %s or run %s)", ErrMissingBinary, f.tool, f.env, installScript)
		}
		st, err := os.Stat(*f.path)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return b, fmt.Errorf("cluster: %w: %s at %s is not an executable file (from %s or %s)",
				ErrMissingBinary, f.tool, *f.path, f.env, installScript)
		}
	}
	return b, nil
}

// runInstallScript runs scripts/install-k8s-tools.sh for tools from the repository root found
// above the working directory and returns its name=path lines.
func runInstallScript(ctx context.Context, tools []string, logf func(string, ...any)) (map[string]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	logf("cluster: %s %s (KUBE_APISERVER/ETCD/KUBECTL unset; it builds what is missing, about 10 minutes cold)",
		installScript, strings.Join(tools, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(root, installScript), tools...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cluster: %w: %s %s: %v\n%s", ErrMissingBinary, installScript,
			strings.Join(tools, " "), err, tail(stderr.Bytes(), 30))
	}
	paths := map[string]string{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if name, path, ok := strings.Cut(sc.Text(), "="); ok {
			paths[name] = path
		}
	}
	return paths, nil
}

// repoRoot is the nearest directory above the working directory that holds the install script.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, installScript)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("cluster: %w: no %s above %s (set KUBE_APISERVER, ETCD and KUBECTL)",
				ErrMissingBinary, installScript, dir)
		}
	}
}
