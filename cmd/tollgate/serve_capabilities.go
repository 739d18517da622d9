package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// addCapabilityFlags registers serve's host-capability flags, and --kubeconfig
// and --context unless serve has them already (they are shared with other
// features).
func addCapabilityFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	if fs.Lookup("kubeconfig") == nil {
		fs.String("kubeconfig", "", "kubeconfig of the cluster context-aware policies read (empty: $KUBECONFIG or ~/.kube/config, else in-cluster)")
	}
	if fs.Lookup("context") == nil {
		fs.String("context", "", "kubeconfig context")
	}
	fs.Int("max-cached-objects", capabilities.DefaultMaxCachedObjects, "most objects cached per Kubernetes resource that context-aware policies read; a resource with more is read by direct calls")
}

// withCapabilities gives every policy serve loads Kubewarden's host
// capabilities: kubernetes get/list for the resources its entry declares
// (contextAwareResources), can_i, oci (through the registry:// client), net
// and crypto, limited by the entry's hostCapabilities when it has them (a bad
// pattern fails that policy's load). The Kubernetes client comes from --kubeconfig/--context or the
// in-cluster configuration; without one, a configuration that declares
// contextAwareResources is refused (Kubewarden's policy-server does not
// start either). It returns a function that stops the caches.
func withCapabilities(cmd *cobra.Command, loader *server.HostLoader, so *server.Options, cfg *config.Config, resolver *module.Resolver, logger *slog.Logger) (func(), error) {
	fs := cmd.Flags()
	kubeconfig, _ := fs.GetString("kubeconfig")
	kubeContext, _ := fs.GetString("context")
	maxObjects, _ := fs.GetInt("max-cached-objects")
	opts := capabilities.Options{Logger: logger.With("component", "capabilities")}
	if reg := registryOf(resolver); reg != nil {
		opts.OCI = registryCapability{reg}
	}
	declared := contextAwarePolicies(cfg)
	rc, err := kubeclient.Config(kubeconfig, kubeContext)
	switch {
	case err != nil && len(declared) > 0:
		return nil, fmt.Errorf("policies %v declare contextAwareResources, but there is no Kubernetes client: kubernetes configuration: %w (give --kubeconfig, or run in a cluster)", declared, err)
	case err != nil:
		logger.Debug("no Kubernetes client: kubernetes host calls will fail", "error", err)
	default:
		if opts.Kubernetes, err = capabilities.NewKubernetesForConfig(rc, capabilities.KubeOptions{MaxCachedObjects: maxObjects}); err != nil {
			return nil, err
		}
	}
	h := capabilities.New(opts)
	loader.HostCalls = func(id string, res []config.ContextAwareResource, caps []string) (wasm.HostCallHandler, error) {
		// hostCapabilities absent (nil): every capability, see RATIONALE.md
		allow := capabilities.Allow{HostCapabilities: caps}
		for _, r := range res {
			allow.Resources = append(allow.Resources, capabilities.Resource{APIVersion: r.APIVersion, Kind: r.Kind})
		}
		return h.ForPolicy(id, allow)
	}
	loader.Cluster = func(id string, res []config.ContextAwareResource) *capabilities.Cluster {
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
		n := len(p.ContextAwareResources)
		if p.Group != nil {
			for _, m := range p.Group.Members {
				n += len(m.ContextAwareResources)
			}
		}
		if n > 0 {
			ids = append(ids, p.ID)
		}
	}
	return ids
}
