package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node's fixed addresses. They exist only inside the network namespace [Isolated] made, so
// they cannot clash with the machine's or another run's.
const (
	// NodeIP is the CNI bridge's address: the node's InternalIP, the kubelet's and the
	// apiserver's address for pods, and the registry's address for pods.
	NodeIP = "10.244.77.1"
	// PodCIDR is the bridge's subnet; pods get addresses from it (host-local IPAM).
	PodCIDR = "10.244.77.0/24"
	// ServiceCIDR is kube-apiserver's --service-cluster-ip-range on a node cluster.
	ServiceCIDR = "10.96.0.0/16"
	// KubernetesServiceIP is the ClusterIP of the `kubernetes` Service (in-cluster config).
	KubernetesServiceIP = "10.96.0.1"
	// NodeName is the node's name.
	NodeName = "e2e-node"
	// APIServerPort is the apiserver's port on a node cluster.
	APIServerPort = 6443
	// RegistryPort is the local registry's port, on loopback (for containerd) and NodeIP (pods).
	RegistryPort = 5000
	// bridgeName is the CNI bridge.
	bridgeName = "tgbr0"
)

// RegistryHost is where containerd pulls images from ("127.0.0.1:5000/repo:tag"); pods reach the
// same registry at PodRegistryHost.
var (
	RegistryHost    = "127.0.0.1:" + strconv.Itoa(RegistryPort)
	PodRegistryHost = NodeIP + ":" + strconv.Itoa(RegistryPort)
)

// PauseImage is the sandbox image containerd runs for every pod: a static binary that sleeps,
// built and pushed by StartNode.
var PauseImage = RegistryHost + "/e2e/pause:1"

// node holds the processes of a node cluster beyond etcd and kube-apiserver.
type node struct {
	registry, containerd, kcm, scheduler, proxy, kubelet *process
}

// nodeTokens are the static tokens of the node's components: user name and groups.
var nodeTokens = []struct{ file, user, groups string }{
	{"kubelet.token", "system:node:" + NodeName, "system:nodes"},
	{"kcm.token", "system:kube-controller-manager", ""},
	{"scheduler.token", "system:kube-scheduler", ""},
	{"proxy.token", "system:kube-proxy", ""},
}

// startNode brings up what turns the control plane into a one-node cluster: the CNI bridge, a
// registry with the pause image, containerd, kube-controller-manager, kube-scheduler, kube-proxy
// and the kubelet, and waits for the node to be Ready.
func (c *Cluster) startNode(ctx context.Context, opts Options, logf func(string, ...any)) error {
	if !InIsolation() {
		return errors.New("cluster: a node runs only inside the namespaces cluster.Isolated makes (it changes the machine's network and mounts)")
	}
	begin := time.Now()
	if err := setupBridge(); err != nil {
		return err
	}
	for _, d := range sandboxTmpfs {
		// A tmpfs of the private mount namespace: nothing the node writes there reaches the
		// machine, and it is gone with the namespace.
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if err := mountTmpfs(d); err != nil {
			return err
		}
	}
	var err error
	if c.node.registry, err = c.startRegistry(ctx, opts); err != nil {
		return err
	}
	if err := c.pushPause(ctx); err != nil {
		return err
	}
	if c.node.containerd, err = c.startContainerd(ctx, opts); err != nil {
		return err
	}
	logf("cluster: registry and containerd ready after %v", time.Since(begin).Round(time.Millisecond))
	kc := func(name string) (string, error) {
		tok, err := os.ReadFile(filepath.Join(c.Dir, name+".token"))
		if err != nil {
			return "", fmt.Errorf("cluster: %w", err)
		}
		p := filepath.Join(c.Dir, name+".kubeconfig")
		return p, os.WriteFile(p, []byte(kubeconfig(c.Server, c.CA.CertPEM, string(tok))), 0o600)
	}
	kcmConfig, err := kc("kcm")
	if err != nil {
		return err
	}
	if c.node.kcm, err = startProcess(c.Dir, "kube-controller-manager", c.Binaries.KubeControllerManager,
		"--kubeconfig="+kcmConfig,
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(c.Dir, "sa.key"),
		"--root-ca-file="+filepath.Join(c.Dir, "ca.crt"),
		"--bind-address=127.0.0.1", "--secure-port=10257",
		"--cert-dir="+filepath.Join(c.Dir, "kcm-certs"),
		"--cluster-name=e2e",
		// A node that stops answering is noticed in 20 s rather than 40 s.
		"--node-monitor-grace-period=20s",
		// The ReplicaSet, Deployment, EndpointSlice and garbage-collector controllers are what
		// the operator's objects need; every default controller runs, as on a real cluster.
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		"--profiling=false",
	); err != nil {
		return err
	}
	schedConfig, err := kc("scheduler")
	if err != nil {
		return err
	}
	if c.node.scheduler, err = startProcess(c.Dir, "kube-scheduler", c.Binaries.KubeScheduler,
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259",
		"--cert-dir="+filepath.Join(c.Dir, "scheduler-certs"), "--profiling=false",
	); err != nil {
		return err
	}
	proxyConfig, err := kc("proxy")
	if err != nil {
		return err
	}
	if c.node.proxy, err = c.startKubeProxy(proxyConfig); err != nil {
		return err
	}
	kubeletConfig, err := kc("kubelet")
	if err != nil {
		return err
	}
	if c.node.kubelet, err = c.startKubelet(kubeletConfig); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, opts.StartTimeout+60*time.Second); err != nil {
		return err
	}
	c.NodeStartDuration = time.Since(begin)
	logf("cluster: node %s Ready after %v", NodeName, c.NodeStartDuration.Round(time.Millisecond))
	return nil
}

// sandboxTmpfs are the machine paths a node writes to by default (CNI's IPAM state, pod logs,
// containerd's runtime state and pod network namespaces, the kubelet's root): startNode mounts a
// tmpfs on each, in the sandbox's private mount namespace.
var sandboxTmpfs = []string{"/var/lib/cni", "/var/log/pods", "/var/log/containers", "/run/containerd", "/run/netns", "/var/lib/kubelet"}

// stopNodeLeftovers kills what outlives containerd (its shims and the containers, the kernel would
// kill them with the PID namespace anyway) and unmounts what the node mounted (the containers'
// root filesystems, volumes, the sandbox's tmpfs), so that Dir can be removed and a later cluster
// in the same namespaces starts clean.
func (c *Cluster) stopNodeLeftovers() error {
	self := os.Getpid()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			if !strings.Contains(string(cmdline), "containerd-shim") && !strings.Contains(string(cg), "/kubepods") {
				continue
			}
			// Orphans (shims daemonize) are this process's children: it is the namespace's
			// init. Reap them by PID, never with wait(-1), which would take os/exec's.
			var ws syscall.WaitStatus
			if p, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); p == pid {
				continue
			}
			if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); zombie(stat) {
				continue // someone else's child, about to be reaped
			}
			left++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %d container processes left 10 s after SIGKILL", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		mine := strings.HasPrefix(mp, c.Dir+"/")
		for _, d := range sandboxTmpfs {
			mine = mine || mp == d || strings.HasPrefix(mp, d+"/")
		}
		if mine {
			mounts = append(mounts, mp)
		}
	}
	// Deepest first; MNT_DETACH for a mount still busy.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, mp := range mounts {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("cluster: unmount %s: %w", mp, err))
		}
	}
	// The kubelet's cgroups, now empty (Isolated's parent removes them too, should this fail).
	errs = append(errs, removeKubepods(func(string) bool { return false }))
	return errors.Join(errs...)
}

// zombie reports whether /proc/PID/stat says the process has exited (state Z or X).
func zombie(stat []byte) bool {
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	return stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// setupBridge creates the CNI bridge with the node's address before the kubelet starts (the
// kubelet needs its node IP to exist; the bridge plugin finds the bridge and its gateway
// address in place).
func setupBridge() error {
	for _, args := range [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("cluster: ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func mountTmpfs(dir string) error {
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("cluster: mount tmpfs on %s: %w: %s", dir, err, out)
	}
	return nil
}

// startRegistry runs Debian's docker-registry (CNCF distribution) on every address of the
// namespace, port RegistryPort, storing in Dir/registry.
func (c *Cluster) startRegistry(ctx context.Context, opts Options) (*process, error) {
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: 0.0.0.0:%d
`, filepath.Join(c.Dir, "registry"), RegistryPort)
	path := filepath.Join(c.Dir, "registry.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	p, err := startProcess(c.Dir, "registry", c.Binaries.Registry, "serve", path)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return p, waitFor(ctx, opts.StartTimeout, p, func() error {
		return getOK(hc, "http://"+RegistryHost+"/v2/", nil, "")
	})
}

// startContainerd runs containerd with its state under Dir/containerd, the CRI plugin set for
// this machine: cgroupfs, containerd's own oom_score_adj as the floor (the sandbox may not lower
// scores), the pause image and the registry over plain HTTP.
func (c *Cluster) startContainerd(ctx context.Context, opts Options) (*process, error) {
	dir := filepath.Join(c.Dir, "containerd")
	for _, d := range []string{"root", "state", "cni"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	c.ContainerdSocket = filepath.Join(dir, "containerd.sock")
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "tollgate-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": %q, "gw": %q}]
    }
  }]
}
`, bridgeName, PodCIDR, NodeIP, ServiceCIDR, NodeIP)
	// Pods get a route to the Service range only: no default route, so nothing in a pod can
	// reach beyond this namespace.
	if err := os.WriteFile(filepath.Join(dir, "cni", "10-tollgate-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors.%q]
    endpoint = [%q]
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.ContainerdSocket, PauseImage,
		cniBinDir, filepath.Join(dir, "cni"), RegistryHost, "http://"+RegistryHost)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	p, err := startProcess(c.Dir, "containerd", c.Binaries.Containerd, "--config", path)
	if err != nil {
		return nil, err
	}
	return p, waitFor(ctx, opts.StartTimeout, p, func() error {
		if _, err := os.Stat(c.ContainerdSocket); err != nil {
			return err
		}
		return nil
	})
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

func (c *Cluster) startKubeProxy(kubeconfig string) (*process, error) {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Leave the machine-wide conntrack table size and timeouts alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, NodeName, PodCIDR)
	path := filepath.Join(c.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return startProcess(c.Dir, "kube-proxy", c.Binaries.KubeProxy, "--config="+path)
}

func (c *Cluster) startKubelet(kubeconfig string) (*process, error) {
	root := filepath.Join("/var/lib/kubelet") // a tmpfs of the sandbox (startNode)
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v2 cannot be had on these machines (the memory controller is bound to the v1 tree).
failCgroupV1: false
cgroupDriver: cgroupfs
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%s
# No DNS: nothing outside resolves, and pods need none.
resolvConf: ""
failSwapOn: false
# The machine's disk is shared with builds: evict only when it is really full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# ConfigMap and Secret volumes are refreshed on this period (plus the cache TTL), as on any node.
syncFrequency: 20s
fileCheckFrequency: 20s
nodeStatusUpdateFrequency: 5s
registerNode: true
podLogsDir: /var/log/pods
`, NodeIP, filepath.Join(c.Dir, "ca.crt"), c.ContainerdSocket)
	path := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return startProcess(c.Dir, "kubelet", c.Binaries.Kubelet,
		"--config="+path,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+root,
		"--cert-dir="+filepath.Join(c.Dir, "kubelet-certs"),
		"--hostname-override="+NodeName,
		"--node-ip="+NodeIP,
		"--v=1",
	)
}

// waitNodeReady waits for the node to register and report Ready.
func (c *Cluster) waitNodeReady(ctx context.Context, timeout time.Duration) error {
	var last string
	return waitFor(ctx, timeout, c.node.kubelet, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				last = cond.Reason + ": " + cond.Message
			}
		}
		return fmt.Errorf("node %s not Ready: %s", NodeName, last)
	})
}

// nodeProcesses lists the node's processes, the first to stop first.
func (c *Cluster) nodeProcesses() []*process {
	return []*process{c.node.kubelet, c.node.proxy, c.node.scheduler, c.node.kcm, c.node.containerd, c.node.registry}
}

// StopRegistry stops the node's registry (what the pods pulled stays pulled), for tests of what
// works without it; StartRegistry starts it again, with its storage, on the same port.
func (c *Cluster) StopRegistry() error {
	if c.node.registry == nil {
		return fmt.Errorf("cluster: no registry running (Options.Node)")
	}
	err := c.node.registry.stop(5 * time.Second)
	c.node.registry = nil
	return err
}

// StartRegistry starts the node's registry stopped by StopRegistry; nothing when it runs.
func (c *Cluster) StartRegistry(ctx context.Context) error {
	if c.node.registry != nil || !c.nodeMode {
		return nil
	}
	p, err := c.startRegistry(ctx, Options{StartTimeout: 60 * time.Second})
	if err != nil {
		return err
	}
	c.node.registry = p
	return nil
}
