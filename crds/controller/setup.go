package controller

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// setup registers the reconcilers with the manager: the PolicyServer reconciler, the policy
// reconcilers and the leader-only certificate checker, around one CertManager.
func setup(mgr ctrl.Manager, o Options) error {
	certs := NewCertManager(mgr.GetClient(), o)
	ps := &PolicyServerReconciler{
		Client:  mgr.GetClient(),
		Options: o,
		Certs:   certs,
		// uncached reads of the context-aware ClusterRole and ClusterRoleBinding
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorderFor("tollgate-controller"), //nolint:staticcheck // the core/v1 Events API, as the policy reconcilers
	}
	if err := ps.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := setupPolicyReconcilers(mgr, o, certs); err != nil {
		return err
	}
	return mgr.Add(&certChecker{certs: certs, interval: o.CertCheckInterval})
}

// certChecker runs CertManager.Check at start and then every interval, on the leader only.
type certChecker struct {
	certs    *CertManager
	interval time.Duration
}

// NeedLeaderElection makes the checker run on the leader only.
func (*certChecker) NeedLeaderElection() bool { return true }

// Start checks the certificates until ctx ends. A failed check is logged and retried at the
// next tick (or sooner: every PolicyServer reconcile checks its own certificate).
func (c *certChecker) Start(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		if changed, err := c.certs.Check(ctx); err != nil {
			c.certs.o.Logger.Error("certificate check failed", "error", err)
		} else if changed {
			c.certs.o.Logger.Info("CA secret changed", "secret", c.certs.o.CASecret)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
