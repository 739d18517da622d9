package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// TestMain finds or builds the binaries with the machine's network, then runs the package's tests
// inside the namespaces of cluster.Isolated (TestNode's node lives there; the other tests run
// their control planes on its loopback).
func TestMain(m *testing.M) {
	if !cluster.InIsolation() {
		if _, err := cluster.ResolveBinaries(context.Background(), cluster.Binaries{}, true, func(f string, a ...any) { fmt.Printf(f+"\n", a...) }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(cluster.Isolated(m.Run))
}

// TestNode brings up the one-node cluster and runs a pod on it: the node registers Ready with its
// bridge address, the scheduler places the pod, containerd pulls the pause image from the local
// registry and runs it under runc, the pod gets an address on the bridge, `kubectl logs` reaches
// the kubelet through the apiserver, and the `kubernetes` Service has the apiserver as endpoint.
func TestNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, cluster.Options{Logf: t.Logf, Node: true})
	t.Logf("timing: control plane %v, node Ready %v later", c.StartDuration.Round(time.Millisecond), c.NodeStartDuration.Round(time.Millisecond))

	n, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != cluster.NodeIP || !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("node InternalIP %q (want %s), runtime %q", internal, cluster.NodeIP, n.Status.NodeInfo.ContainerRuntimeVersion)
	}

	if _, _, err := c.Kubectl(ctx, "create", "namespace", "node-e2e"); err != nil {
		t.Fatal(err)
	}
	// kube-controller-manager gives the namespace its default ServiceAccount, which pods need.
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := c.Client.CoreV1().ServiceAccounts("node-e2e").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no default ServiceAccount after a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	begin := time.Now()
	_, err = c.Client.CoreV1().Pods("node-e2e").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "pause", Image: cluster.PauseImage}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pod, err = c.Client.CoreV1().Pods("node-e2e").Get(ctx, "sleeper", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == corev1.PodRunning && len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not running after 2 minutes: %+v", pod.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("timing: pod Running and ready %v after its creation", time.Since(begin).Round(time.Millisecond))
	_, podNet, _ := net.ParseCIDR(cluster.PodCIDR)
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !podNet.Contains(ip) || pod.Status.PodIP == cluster.NodeIP {
		t.Errorf("pod IP %q, want one in %s", pod.Status.PodIP, cluster.PodCIDR)
	}
	// The apiserver reaches the kubelet (x509 client, InternalIP) and the container's output.
	var logs string
	for time.Now().Before(deadline) {
		if logs, _, err = c.Kubectl(ctx, "logs", "-n", "node-e2e", "sleeper"); err == nil && strings.Contains(logs, "holding") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || !strings.Contains(logs, "pause: holding the pod's namespaces") {
		t.Errorf("kubectl logs: %q, %v", logs, err)
	}
	// In-cluster clients dial the `kubernetes` Service, which must lead to the apiserver.
	ep, err := c.Client.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || ep.Subsets[0].Addresses[0].IP != cluster.NodeIP {
		t.Errorf("kubernetes endpoints %+v (%v), want %s", ep, err, cluster.NodeIP)
	}
	if os.Getenv(holdEnv) == "1" { // TestTeardown's subprocess: a node with a running pod, until a signal
		fmt.Println(holdingLine)
		select {}
	}
	if err := c.Client.CoreV1().Pods("node-e2e").Delete(ctx, "sleeper", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.Client.CoreV1().Pods("node-e2e").Get(ctx, "sleeper", metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod not gone after its deletion")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdEnv=1 makes TestNode hold its node, pod running, after printing holdingLine.
const (
	holdEnv     = "TOLLGATE_E2E_HOLD"
	holdingLine = "node: holding"
)

// machineSysctls are the machine-wide sysctls the kubelet sets.
var machineSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

func readSysctls(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, k := range machineSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		m[k] = strings.TrimSpace(string(b))
	}
	return m
}

// nodeLeftovers lists what a node leaves on the machine if its teardown failed: processes of the
// node's binaries, kubepods cgroups at the roots of the cgroup hierarchies.
func nodeLeftovers() []string {
	var left []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		switch c := strings.TrimSpace(string(comm)); c {
		case "kubelet", "containerd", "containerd-shim", "containerd-shim-runc-v2", "kube-apiserver", "etcd", "kube-proxy", "kube-scheduler", "kube-controller-manager", "pause", "docker-registry":
			if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); !strings.Contains(string(stat), ") Z ") {
				left = append(left, "process "+e.Name()+" "+c)
			}
		}
	}
	hs, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hs {
		ds, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", h.Name(), "kubepods*"))
		for _, d := range ds {
			left = append(left, "cgroup "+d)
		}
	}
	return left
}

// TestTeardown interrupts a node (TestNode holding its node, in a subprocess with namespaces of
// its own): after SIGINT nothing is left and the sysctls the kubelet changed are back; after
// SIGKILL of the process that would restore them, the kernel still kills every process of the
// node, and the next run restores the sysctls and removes the cgroups.
func TestTeardown(t *testing.T) {
	if os.Getenv(holdEnv) == "1" {
		t.Skip("inside TestTeardown's own subprocess")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// What the machine had before this binary's first node (TestNode's kubelet already changed the
	// live values; the parent restores these at the end).
	before := map[string]string{}
	for k, v := range cluster.PristineSysctls() {
		if slices.Contains(machineSysctls, k) {
			before[k] = v
		}
	}
	if left := nodeLeftovers(); len(left) > 0 {
		t.Fatalf("leftovers before the test: %v", left)
	}
	env := []string{holdEnv + "=1", cluster.LockHeldEnv + "=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, cluster.IsolatedEnv+"=") {
			env = append(env, kv)
		}
	}
	start := func() *exec.Cmd {
		t.Helper()
		cmd := exec.CommandContext(ctx, "/proc/self/exe", "-test.run", "^TestNode$", "-test.v")
		cmd.Env = env
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), holdingLine) {
				go func() { _, _ = io.Copy(io.Discard, out) }()
				return cmd
			}
		}
		_ = cmd.Wait()
		t.Fatalf("the subprocess ended before its node was up")
		return nil
	}
	waitGone := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for left := nodeLeftovers(); len(left) > 0; left = nodeLeftovers() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: left on the machine after 30 s: %v", what, left)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// SIGINT: the parent passes it on, the tests end, the kernel kills the node, the parent restores.
	cmd := start()
	if len(nodeLeftovers()) == 0 {
		t.Fatal("no node process seen while the node runs: the leftover check would see nothing")
	}
	during := readSysctls(t)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	waitGone("after SIGINT")
	if after := readSysctls(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("sysctls after SIGINT %v, before %v (during %v)", after, before, during)
	}
	t.Logf("SIGINT: nothing left; sysctls %v during the node, %v after", during, before)

	// SIGKILL of the parent: nothing can restore, but no process survives it; the next run repairs.
	cmd = start()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var procs []string
		for _, l := range nodeLeftovers() {
			if strings.HasPrefix(l, "process ") {
				procs = append(procs, l)
			}
		}
		if len(procs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left 30 s after SIGKILL: %v", procs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	repair := exec.CommandContext(ctx, "/proc/self/exe", "-test.run", "^$")
	repair.Env = env
	if out, err := repair.CombinedOutput(); err != nil {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
	waitGone("after SIGKILL and the next run")
	if after := readSysctls(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("sysctls after SIGKILL and the next run %v, before %v", after, before)
	}
}
