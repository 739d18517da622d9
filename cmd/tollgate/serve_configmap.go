package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// configMapResync re-delivers the cached ConfigMap (an unchanged content reloads nothing); the
// reflector relists on its own whenever its watch ends.
const configMapResync = 5 * time.Minute

// addConfigMapFlags registers --policies-configmap on serve, and --kubeconfig and --context
// unless serve has them already (they may be shared with other features).
func addConfigMapFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.String("policies-configmap", "", "NAMESPACE/NAME: also watch policies.yml in this ConfigMap through the Kubernetes API (reloads within a second of a change; "+
		"the --policies file serves until the API answers, and when it cannot be reached)")
	if fs.Lookup("kubeconfig") == nil {
		fs.String("kubeconfig", "", "kubeconfig for --policies-configmap (empty: in-cluster, then $KUBECONFIG and ~/.kube/config)")
	}
	if fs.Lookup("context") == nil {
		fs.String("context", "", "kubeconfig context for --policies-configmap")
	}
}

// withPoliciesConfigMap sets so.API to a watch of the --policies-configmap ConfigMap's
// policies.yml (nothing without the flag). Content from the API is parsed as the file is
// (sources.yml is read at start only, so it is not watched).
func withPoliciesConfigMap(cmd *cobra.Command, so *server.Options, opts config.Options, sources config.Sources, logger *slog.Logger) error {
	ref, _ := cmd.Flags().GetString("policies-configmap")
	if ref == "" {
		return nil
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--policies-configmap=%s: %w: want NAMESPACE/NAME", ref, config.ErrInvalid)
	}
	kubeconfig, _ := cmd.Flags().GetString("kubeconfig")
	kubeContext, _ := cmd.Flags().GetString("context")
	rc, err := kubeclient.Config(kubeconfig, kubeContext)
	if err != nil && kubeconfig == "" && kubeContext == "" {
		// Not in a cluster (or no token mounted) and no kubeconfig: the API path is an
		// improvement, never a requirement; the mounted file serves alone.
		logger.Warn("--policies-configmap: no Kubernetes client configuration; serving the --policies file only", "configmap", ref, "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--policies-configmap: kubeconfig: %w", err)
	}
	rc = rest.AddUserAgent(rest.CopyConfig(rc), "tollgate-serve")
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--policies-configmap: %w", err)
	}
	what := "configmap " + ref + " " + v1.PoliciesKey
	so.API = configMapSource(cs, ns, name, logger.With("configmap", ref))
	so.ParseAPI = func(b []byte) (*config.Config, error) {
		pols, warns, err := config.ParsePolicies(what, b)
		if err != nil {
			return nil, err
		}
		return &config.Config{Options: opts, Policies: pols, Warnings: warns, Sources: sources, Source: b}, nil
	}
	logger.Info("watching the policies' ConfigMap through the Kubernetes API", "configmap", ref, "host", rc.Host)
	return nil
}

// configMapSource lists and watches the one ConfigMap ns/name (field selector on its name, so
// that a Role limited to that name by resourceNames allows it) and delivers its policies.yml.
// The reflector retries failed lists and watches with backoff; each failure goes to
// sink.WatchError. A deleted ConfigMap, or one without the key, delivers nothing: the last
// content keeps serving.
func configMapSource(cs kubernetes.Interface, ns, name string, logger *slog.Logger) server.APISource {
	return func(ctx context.Context, sink server.APISink) {
		lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, configMapResync, cache.Indexers{})
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return
			}
			sink.WatchError(err)
		})
		deliver := func(obj any) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok || cm.Name != name {
				return
			}
			v, ok := cm.Data[v1.PoliciesKey]
			if !ok {
				logger.Warn("the ConfigMap has no " + v1.PoliciesKey + "; the last content keeps serving")
				return
			}
			sink.Update([]byte(v))
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    deliver,
			UpdateFunc: func(_, obj any) { deliver(obj) },
			DeleteFunc: func(any) { logger.Warn("the ConfigMap was deleted; the last content keeps serving") },
		})
		inf.RunWithContext(ctx)
	}
}
