package controller

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/internal/kubeclient"
)

// Scheme returns a scheme with the Kubernetes kinds and tollgate's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Run runs the controller until ctx ends (or it loses its leadership).
func Run(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	cfg, err := kubeclient.Config(o.Kubeconfig, o.Context)
	if err != nil {
		return fmt.Errorf("controller: kubeconfig: %w", err)
	}
	// client-go's default client-side limit (5 requests/s, burst 10) throttled activating 200
	// policies to 47-58 s (18.7 s without it): leave flow control to the apiserver (API
	// Priority and Fairness), as controller-runtime's own GetConfig does.
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	lg := logr.FromSlogHandler(o.Logger.Handler())
	log.SetLogger(lg)
	ns := map[string]cache.Config{o.Namespace: {}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Logger:                  lg,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        o.LeaderElectionID,
		LeaderElectionNamespace: o.Namespace,
		// Release the lease on a clean stop so that a new replica takes over at once.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		// Namespaced objects the controller owns live in its own namespace only: caching
		// them cluster-wide would cost memory for every Secret and ConfigMap of the cluster.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:                {Namespaces: ns},
			&corev1.ConfigMap{}:             {Namespaces: ns},
			&corev1.Service{}:               {Namespaces: ns},
			&corev1.ServiceAccount{}:        {Namespaces: ns},
			&appsv1.Deployment{}:            {Namespaces: ns},
			&policyv1.PodDisruptionBudget{}: {Namespaces: ns},
			&discoveryv1.EndpointSlice{}:    {Namespaces: ns},
			// The chart grants Roles and RoleBindings in this namespace only: a cluster-wide
			// watch is forbidden, and the controller never synced (seen on a real node, where the
			// controller runs as its ServiceAccount, not as an admin).
			&rbacv1.Role{}:        {Namespaces: ns},
			&rbacv1.RoleBinding{}: {Namespaces: ns},
		}},
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := setup(mgr, o); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	o.Logger.Info("controller starting", "namespace", o.Namespace, "leaderElection", o.LeaderElect)
	return mgr.Start(ctx)
}
