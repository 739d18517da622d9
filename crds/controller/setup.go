package controller

import ctrl "sigs.k8s.io/controller-runtime"

// setup registers the reconcilers with the manager. (Placeholder until the reconcilers land.)
func setup(mgr ctrl.Manager, o Options) error { return nil }
