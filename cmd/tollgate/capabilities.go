package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// capabilityFlags are kwctl's host-capability flags of run and bench.
type capabilityFlags struct {
	allowContextAware bool
	kubeconfig        string
	kubeContext       string
	record            string
	replay            string
	allowed           []string
	maxCachedObjects  int
	// repeat replays the session over and over (bench).
	repeat bool
	// direct answers kubernetes calls without caches (run: one evaluation
	// would pay a whole list of the kind to fill a cache it never reuses).
	direct bool
}

func (f *capabilityFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&f.allowContextAware, "allow-context-aware", false, "let the policy get and list the Kubernetes resources its metadata declares (contextAwareResources)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster context-aware policies read (default $KUBECONFIG or ~/.kube/config, else in-cluster)")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context (default its current context)")
	fs.StringVar(&f.record, "record-host-capabilities-interactions", "", "record the policy's host calls and their answers to `FILE` (kwctl's session format)")
	fs.StringVar(&f.replay, "replay-host-capabilities-interactions", "", "answer the policy's host calls from `FILE` (a session recorded by kwctl or tollgate), without a cluster or registry")
	fs.StringSliceVar(&f.allowed, "allowed-host-capabilities", []string{"*"}, "host capabilities the policy may use: *, a prefix such as oci/* or kubernetes/*, or one capability such as net/v1/dns_lookup_host")
	if cmd.Name() == "bench" {
		fs.IntVar(&f.maxCachedObjects, "max-cached-objects", capabilities.DefaultMaxCachedObjects, "most objects cached per Kubernetes resource; a resource with more is read by direct calls")
	} else {
		f.direct = true // one evaluation: direct calls, no caches to fill
	}
	cmd.MarkFlagsMutuallyExclusive("record-host-capabilities-interactions", "replay-host-capabilities-interactions")
}

// hostCalls makes the host capabilities of the policy run or bench loads,
// which declares the resources declared (its metadata's, or its manifest's):
// its host-call handler, its view of the cluster (the data of a
// context-aware Rego policy: the granted resources, none without
// --allow-context-aware) and a function to call when done (it finishes a
// recording and reports replayed sessions with exchanges left over).
func (f *capabilityFlags) hostCalls(id string, declared []metadata.ContextAwareResource, reg *oci.Lazy, logger *slog.Logger) (wasm.HostCallHandler, *capabilities.Cluster, func() error, error) {
	allow := capabilities.Allow{HostCapabilities: f.allowed}
	switch {
	case f.allowContextAware && len(declared) == 0:
		logger.Warn("--allow-context-aware: the policy's metadata declares no contextAwareResources; its kubernetes get and list calls will be denied")
	case !f.allowContextAware && len(declared) > 0:
		logger.Warn("the policy declares contextAwareResources, but --allow-context-aware is not set: its kubernetes get and list calls will be denied (a Rego policy gets no cluster data)")
	case f.allowContextAware:
		for _, r := range declared {
			allow.Resources = append(allow.Resources, capabilities.Resource{APIVersion: r.APIVersion, Kind: r.Kind})
		}
	}
	opts := capabilities.Options{Logger: logger}
	if reg != nil {
		opts.OCI = reg
	}
	var err error
	if f.replay != "" {
		if opts.Replay, err = capabilities.LoadSession(f.replay); err != nil {
			return nil, nil, nil, fmt.Errorf("--replay-host-capabilities-interactions: %w", err)
		}
		if f.repeat {
			opts.Replay.Repeat()
		}
	} else if len(allow.Resources) > 0 {
		cfg, err := kubeclient.Config(f.kubeconfig, f.kubeContext)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--allow-context-aware: kubernetes configuration: %w", err)
		}
		max := f.maxCachedObjects
		if f.direct {
			max = -1
		}
		if opts.Kubernetes, err = capabilities.NewKubernetesForConfig(cfg, capabilities.KubeOptions{MaxCachedObjects: max}); err != nil {
			return nil, nil, nil, err
		}
	}
	if f.record != "" {
		if opts.Record, err = capabilities.NewRecorder(f.record); err != nil {
			return nil, nil, nil, fmt.Errorf("--record-host-capabilities-interactions: %w", err)
		}
	}
	h := capabilities.New(opts)
	call, err := h.ForPolicy(id, allow)
	if err != nil {
		h.Close()
		return nil, nil, nil, fmt.Errorf("--allowed-host-capabilities: %w", err)
	}
	done := func() error {
		h.Close()
		var errs []error
		if opts.Record != nil {
			errs = append(errs, opts.Record.Close())
		}
		if opts.Replay != nil && opts.Replay.Remaining() > 0 && !f.repeat {
			logger.Warn("some recorded host-capability exchanges were not replayed", "file", f.replay, "left", opts.Replay.Remaining(), "total", opts.Replay.Len())
		}
		return errors.Join(errs...)
	}
	return call, h.Cluster(id, allow.Resources), done, nil
}

// registryOf is the resolver's registry client, when it is tollgate's.
func registryOf(r *module.Resolver) *oci.Lazy {
	l, _ := r.Registry.(*oci.Lazy)
	return l
}
