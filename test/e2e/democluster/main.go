// Command democluster is `make demo-cluster`: it brings up the one-node cluster of the end-to-end
// tests (test/e2e/cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// kube-proxy, containerd, the kubelet, a CNI bridge and a registry, inside namespaces of its own),
// pushes tollgate's image to the cluster's registry, installs charts/tollgate with helm, pushes two
// example policies, applies them, and shows from kubectl a request denied by one and a Pod mutated
// by the other. Then it keeps the cluster up and says how to use and stop it; Ctrl-C (or
// DEMO_EXIT=1) tears everything down, leaving nothing on the machine.
//
// It runs what docs/operator.md's quickstart tells an operator to run. Root is needed (it runs a
// kubelet). Inputs: TOLLGATE_BIN and TOLLGATE_IMAGE_LAYOUT (make demo-cluster sets them), the
// Kubernetes tools from scripts/install-k8s-tools.sh.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

func main() {
	if !cluster.InIsolation() {
		if err := prepare(); err != nil {
			fmt.Fprintln(os.Stderr, "demo-cluster:", err)
			os.Exit(1)
		}
	}
	os.Exit(cluster.Isolated(func() int {
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, "demo-cluster:", err)
			return 1
		}
		return 0
	}))
}

// prepare finds or builds the tools with the machine's network, before the namespaces.
func prepare() error {
	ctx := context.Background()
	say := func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
	say("finding the Kubernetes tools and helm (scripts/install-k8s-tools.sh builds missing ones: about 10 minutes the first time)")
	if _, err := cluster.ResolveBinaries(ctx, cluster.Binaries{}, true, func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }); err != nil {
		return err
	}
	for _, v := range []string{"TOLLGATE_BIN", "TOLLGATE_IMAGE_LAYOUT"} {
		if p := os.Getenv(v); p == "" {
			return fmt.Errorf("%s is not set (run `make demo-cluster`, which builds tollgate and its image)", v)
		} else if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s: %w (run `make demo-cluster`)", v, err)
		}
	}
	return nil
}

const (
	namespace = "tollgate"
	imageTag  = "demo"
)

func run() error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	say := func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
	dir, err := os.MkdirTemp("", "tollgate-demo-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	say("starting the cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, containerd, kubelet, registry)")
	begin := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Node: true,
		Logf: func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer func() {
		say("tearing the cluster down")
		_ = c.Stop()
	}()
	say("cluster up in %v; node %s Ready", time.Since(begin).Round(100*time.Millisecond), cluster.NodeName)

	kubectlPath := c.Binaries.Kubectl
	sh := func(stdin string, name string, args ...string) (string, error) {
		shown := filepath.Base(name)
		fmt.Printf("\n$ %s %s\n", shown, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
			fmt.Print(indent(stdin))
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		fmt.Print(out.String())
		return out.String(), err
	}
	kubectl := func(stdin string, args ...string) (string, error) { return sh(stdin, kubectlPath, args...) }

	// The image a user builds with `make image` and pushes to their registry.
	image := cluster.RegistryHost + "/tollgate:" + imageTag
	if _, err := cluster.PushLayout(ctx, os.Getenv("TOLLGATE_IMAGE_LAYOUT"), image); err != nil {
		return err
	}
	say("pushed tollgate's image as %s", image)

	say("installing the chart (the controller, and a default PolicyServer that fetches policies from the cluster's registry)")
	if _, err := sh("", c.Binaries.Helm, "install", "tollgate", "charts/tollgate", "--namespace", namespace, "--create-namespace",
		"--set", "image.repository="+cluster.RegistryHost+"/tollgate", "--set", "image.tag="+imageTag,
		"--set-json", `policyServer.insecureSources=["`+cluster.PodRegistryHost+`"]`, "--wait", "--timeout", "5m"); err != nil {
		return fmt.Errorf("helm install: %w", err)
	}

	say("pushing two example policies to the registry (tollgate push)")
	sources := filepath.Join(dir, "sources.yml")
	if err := os.WriteFile(sources, []byte(`insecure_sources: ["`+cluster.RegistryHost+`"]`+"\n"), 0o644); err != nil {
		return err
	}
	for _, p := range []string{"required-labels", "capabilities-drop"} {
		if _, err := sh("", os.Getenv("TOLLGATE_BIN"), "push", "--force", "--sources-path", sources, "examples/"+p+"/policy.wasm",
			"registry://"+cluster.RegistryHost+"/policies/"+p+":v1"); err != nil {
			return fmt.Errorf("tollgate push: %w", err)
		}
	}

	say("applying the policies")
	// The two policies, as docs/operator.md's quickstart shows them (step 4).
	policy := func(name, settings string, mutating bool) string {
		return fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicy
metadata:
  name: %s
spec:
  module: registry://%s/policies/%s:v1
%s  rules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [pods]
      operations: [CREATE]
  namespaceSelector:
    matchLabels: {demo: "true"}
  mutating: %t
`, name, cluster.PodRegistryHost, name, settings, mutating)
	}
	policies := policy("required-labels", "  settings:\n    mandatory_labels: [owner]\n", false) + "---\n" +
		policy("capabilities-drop", "", true)
	if _, err := kubectl(policies, "apply", "-f", "-"); err != nil {
		return err
	}
	if _, err := kubectl("", "wait", "--for=jsonpath={.status.policyStatus}=active", "--timeout=180s",
		"clusteradmissionpolicy/required-labels", "clusteradmissionpolicy/capabilities-drop"); err != nil {
		_, _ = kubectl("", "get", "clusteradmissionpolicies", "-o", "wide")
		return err
	}
	if _, err := kubectl("", "create", "namespace", "shop"); err != nil {
		return err
	}
	if _, err := kubectl("", "label", "namespace", "shop", "demo=true"); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; { // the namespace's default ServiceAccount
		if _, err := exec.Command(kubectlPath, "--kubeconfig", c.Kubeconfig, "get", "serviceaccount", "default", "-n", "shop").CombinedOutput(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	pod := func(name, labels string) string {
		return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: shop` + labels + `
spec:
  containers:
    - name: app
      image: ` + cluster.PauseImage + `
      securityContext:
        capabilities:
          add: [NET_ADMIN]
`
	}
	say("a Pod without an owner label: required-labels denies it")
	out, err := kubectl(pod("nginx", ""), "create", "-f", "-")
	if err == nil || !strings.Contains(out, "denied the request") {
		return fmt.Errorf("the Pod without an owner label was not denied: %v", err)
	}
	say("a Pod with one: admitted, and capabilities-drop's patch is in the stored Pod")
	if _, err := kubectl(pod("nginx", "\n  labels: {owner: me}"), "create", "-f", "-"); err != nil {
		return err
	}
	out, err = kubectl("", "get", "pod", "nginx", "-n", "shop", "-o", "jsonpath={.spec.containers[0].securityContext}")
	if err != nil {
		return err
	}
	var sc struct {
		Capabilities struct{ Drop []string } `json:"capabilities"`
	}
	if json.Unmarshal([]byte(out), &sc) != nil || len(sc.Capabilities.Drop) == 0 {
		return fmt.Errorf("the stored Pod was not mutated: securityContext %s", out)
	}
	fmt.Println()
	if _, err := kubectl("", "wait", "--for=condition=Ready", "pod/nginx", "-n", "shop", "--timeout=60s"); err != nil {
		return err
	}
	_, _ = kubectl("", "get", "pods", "-A", "-o", "wide")

	fmt.Printf(`
==> The cluster is up. From another terminal, as root:

    nsenter -t %d -n -m -- %s --kubeconfig %s get pods -A

  (the cluster lives in network and mount namespaces of its own: nsenter enters them)
==> Press Ctrl-C to tear it all down (processes, mounts, bridge, iptables chains, cgroups,
    sysctls): nothing is left on the machine.
`, cluster.HostPID, kubectlPath, c.Kubeconfig)
	if os.Getenv("DEMO_EXIT") == "1" {
		return nil
	}
	<-ctx.Done()
	fmt.Println()
	return nil
}

func indent(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		b.WriteString("  | " + sc.Text() + "\n")
	}
	return b.String()
}
