// Package cluster runs a real Kubernetes cluster for end-to-end tests, as local processes.
//
// With Options.Node it is a one-node cluster: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kube-proxy, containerd with runc, the kubelet, a CNI bridge and a registry with
// a pause image, on fixed addresses (NodeIP, APIServerPort, RegistryPort) that exist only inside the
// network, mount and PID namespaces that [Isolated] makes: the test binary re-executes itself as
// their PID 1, and the kernel tears the node down with it; the parent restores what is
// machine-wide (sysctls, the kubepods cgroups). Without Node it is etcd and kube-apiserver on free
// loopback ports, and a test that serves a webhook on loopback publishes it with
// [Cluster.PublishEndpoints] (kube-apiserver dials EndpointSlices: --enable-aggregator-routing).
//
// Binaries come from scripts/install-k8s-tools.sh (built from the Go module proxy, pinned) and, for
// containerd and the registry, Debian's packages (scripts/install-tools.sh): the paths in Options,
// else the environment (KUBE_APISERVER, ETCD, KUBECTL, KUBELET, KUBE_CONTROLLER_MANAGER,
// KUBE_SCHEDULER, KUBE_PROXY, CONTAINERD, REGISTRY), else the script's `name=path` lines; call
// [ResolveBinaries] before [Isolated], where there is no network to build with. A missing binary
// is an error, never a reason to skip.
//
// The package knows only Kubernetes, containers and processes: nothing of tollgate, its CRDs, its
// operator or Wasm. Tests that use it bring those. See docs/e2e.md.
package cluster
