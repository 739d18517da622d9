package serve

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// withCapabilities gives every policy serve loads Kubewarden's host
// capabilities: kubernetes get/list for the resources its entry declares
// (contextAwareResources), can_i, oci (through the registry:// client, with
// or without --verification-path), net and crypto, limited by the entry's
// hostCapabilities when it has them (a bad pattern fails that policy's
// load). The Kubernetes client comes from
// Kubeconfig/Context or the in-cluster configuration; without one, a
// configuration that declares contextAwareResources is refused (Kubewarden's
// policy-server does not start either). It returns a function that stops
// the caches.
func withCapabilities(o Options, m *modules, so *server.Options, cfg *config.Config) (func(), error) {
	// The oci capabilities read through the registry client whether
	// --verification-path is set or not, as Kubewarden's policy-server's
	// (its callback handler gets the sources, never the verification
	// config): verification decides which modules load, not which images a
	// policy may look up.
	opts := capabilities.Options{Logger: o.Logger.With("component", "capabilities"), OCI: m.registry}
	declared := contextAwarePolicies(cfg)
	rc, err := kubeclient.Config(o.Kubeconfig, o.Context)
	switch {
	case err != nil && len(declared) > 0:
		return nil, fmt.Errorf("policies %v declare contextAwareResources, but there is no Kubernetes client: kubernetes configuration: %w (give --kubeconfig, or run in a cluster)", declared, err)
	case err != nil:
		o.Logger.Debug("no Kubernetes client: kubernetes host calls will fail", "error", err)
	default:
		if opts.Kubernetes, err = capabilities.NewKubernetesForConfig(rc, capabilities.KubeOptions{MaxCachedObjects: o.MaxCachedObjects}); err != nil {
			return nil, err
		}
	}
	h := capabilities.New(opts)
	m.loader.HostCalls = func(id string, res []config.ContextAwareResource, caps []string) (wasm.HostCallHandler, error) {
		// hostCapabilities absent (nil): every capability, see RATIONALE.md
		allow := capabilities.Allow{HostCapabilities: caps}
		for _, r := range res {
			allow.Resources = append(allow.Resources, capabilities.Resource{APIVersion: r.APIVersion, Kind: r.Kind})
		}
		return h.ForPolicy(id, allow)
	}
	m.loader.Cluster = func(id string, res []config.ContextAwareResource) *capabilities.Cluster {
		granted := make([]capabilities.Resource, 0, len(res))
		for _, r := range res {
			granted = append(granted, capabilities.Resource{APIVersion: r.APIVersion, Kind: r.Kind})
		}
		return h.Cluster(id, granted)
	}
	so.Metrics = append(so.Metrics, h)
	return h.Close, nil
}

// contextAwarePolicies are the ids of entries (or groups) that declare
// contextAwareResources.
func contextAwarePolicies(cfg *config.Config) []string {
	var ids []string
	for _, p := range cfg.Policies {
		if p.ContextAware() {
			ids = append(ids, p.ID)
		}
	}
	return ids
}
