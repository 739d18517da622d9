package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// reconcileServiceAccount keeps the ServiceAccount the pods run as when spec.serviceAccountName
// is empty. Its only permission is the Role of policyserver_rbac.go: reading its ConfigMap.
func (r *PolicyServerReconciler) reconcileServiceAccount(ctx context.Context, ps *v1.PolicyServer) error {
	sa := &corev1.ServiceAccount{ObjectMeta: r.objectMeta(ps)}
	if _, _, err := applyServerObject(ctx, r.Client, ps, sa); err != nil {
		return fmt.Errorf("ServiceAccount: %w", err)
	}
	return nil
}
