package cluster

import (
	"bufio"
	"bytes"
	"cmp"
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

// Binaries are the paths of the cluster's binaries. The node's are needed only with
// Options.Node.
type Binaries struct {
	KubeAPIServer string
	Etcd          string
	Kubectl       string

	Kubelet               string
	KubeControllerManager string
	KubeScheduler         string
	KubeProxy             string
	// Containerd and Registry come from Debian's packages (scripts/install-tools.sh).
	Containerd string
	Registry   string
	// Helm is not run by the package; it is what installs charts on a node cluster, from the
	// same script, so a caller gets it with the rest before Isolated.
	Helm string
}

// binaryField is one binary: the install script's name for it (empty: a Debian package's file at
// a fixed path), its environment variable, its place in Binaries, and whether only a node needs it.
type binaryField struct {
	tool, env, fixed string
	path             *string
	node             bool
}

func (b *Binaries) fields() []binaryField {
	return []binaryField{
		{tool: "kube-apiserver", env: "KUBE_APISERVER", path: &b.KubeAPIServer},
		{tool: "etcd", env: "ETCD", path: &b.Etcd},
		{tool: "kubectl", env: "KUBECTL", path: &b.Kubectl},
		{tool: "kubelet", env: "KUBELET", path: &b.Kubelet, node: true},
		{tool: "kube-controller-manager", env: "KUBE_CONTROLLER_MANAGER", path: &b.KubeControllerManager, node: true},
		{tool: "kube-scheduler", env: "KUBE_SCHEDULER", path: &b.KubeScheduler, node: true},
		{tool: "kube-proxy", env: "KUBE_PROXY", path: &b.KubeProxy, node: true},
		{env: "CONTAINERD", fixed: "/usr/bin/containerd", path: &b.Containerd, node: true},
		{env: "REGISTRY", fixed: "/usr/bin/docker-registry", path: &b.Registry, node: true},
		{tool: "helm", env: "HELM", path: &b.Helm, node: true},
	}
}

// ResolveBinaries fills what b lacks from the environment (KUBE_APISERVER, ETCD, KUBECTL, and for a
// node KUBELET, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KUBE_PROXY, CONTAINERD, REGISTRY, HELM), then
// from scripts/install-k8s-tools.sh, which builds what is missing (minutes the first time on a
// machine) and prints name=path lines; containerd and the registry are Debian's packages. It sets
// the environment variables to the paths found, so processes started later (a re-executed test
// binary in its namespaces, which has no network to build with) find them.
func ResolveBinaries(ctx context.Context, b Binaries, node bool, logf func(string, ...any)) (Binaries, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	fields := b.fields()
	var missing []string
	for _, f := range fields {
		if f.node && !node {
			continue
		}
		if *f.path == "" {
			*f.path = os.Getenv(f.env)
		}
		if *f.path == "" && f.fixed != "" {
			*f.path = f.fixed
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
		if f.node && !node {
			continue
		}
		how := "from " + f.env + " or " + installScript
		if f.fixed != "" {
			how = "from " + f.env + " or Debian's package (scripts/install-tools.sh installs it)"
		}
		if *f.path == "" {
			return b, fmt.Errorf("cluster: %w: %s (set %s or run %s)", ErrMissingBinary, cmp.Or(f.tool, f.env), f.env, installScript)
		}
		st, err := os.Stat(*f.path)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return b, fmt.Errorf("cluster: %w: %s at %s is not an executable file (%s)", ErrMissingBinary, cmp.Or(f.tool, f.env), *f.path, how)
		}
		os.Setenv(f.env, *f.path)
	}
	return b, nil
}

// runInstallScript runs scripts/install-k8s-tools.sh for tools from the repository root found
// above the working directory and returns its name=path lines.
func runInstallScript(ctx context.Context, tools []string, logf func(string, ...any)) (map[string]string, error) {
	root, err := RepoRoot()
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

// RepoRoot is the repository root: the nearest directory above the working directory that holds
// the install script.
func RepoRoot() (string, error) {
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
