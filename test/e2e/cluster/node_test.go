package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
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
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf, Node: true})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.LogTail(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
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
