// Package cluster runs a real Kubernetes control plane for end-to-end tests: etcd and
// kube-apiserver as local processes on loopback (free ports, a temporary directory), without nodes,
// kubelet, scheduler or controller-manager, and a kubeconfig that the real kubectl uses.
//
// Binaries come from scripts/install-k8s-tools.sh (built from the Go module proxy, pinned): the
// paths in Options, else the environment variables KUBE_APISERVER, ETCD and KUBECTL (which the
// Makefile sets), else the script's `name=path` lines (it is run from the repository root, and
// builds what is missing). A missing binary is an error, never a reason to skip.
//
// Because no kubelet runs, a webhook Service cannot have Pods behind it: the test stands in for the
// kubelet and endpoint controller, serves the webhook on 127.0.0.1 and publishes that listener with
// [Cluster.PublishEndpoints]; kube-apiserver runs with --enable-aggregator-routing=true so it dials
// the Service's EndpointSlice instead of its ClusterIP (see docs/e2e.md).
//
// The package knows only Kubernetes and processes: nothing of tollgate, its CRDs, its operator or
// Wasm. Tests that use it bring those.
package cluster
