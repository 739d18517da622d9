package controller

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// serverRoleRules are the policy server's permissions: reading its own ConfigMap, which
// `tollgate serve --policies-configmap` watches (a list and a watch with a field selector on
// the name are allowed by resourceNames).
func serverRoleRules(ps *v1.PolicyServer) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups:     []string{""},
		Resources:     []string{"configmaps"},
		ResourceNames: []string{v1.PolicyServerObjectName(ps.Name)},
		Verbs:         []string{"get", "list", "watch"},
	}}
}

// serverServiceAccount is the ServiceAccount the policy server's pods run as.
func serverServiceAccount(ps *v1.PolicyServer) string {
	if sa := ps.Spec.ServiceAccountName; sa != "" {
		return sa
	}
	return v1.PolicyServerObjectName(ps.Name)
}

// reconcileRBAC keeps the Role that lets the policy server read its ConfigMap and the
// RoleBinding of it to the server's ServiceAccount (the controller's, or spec.serviceAccountName),
// both named PolicyServerObjectName. A RoleBinding whose roleRef differs (it cannot be updated)
// is deleted and made again.
func (r *PolicyServerReconciler) reconcileRBAC(ctx context.Context, ps *v1.PolicyServer) error {
	role := &rbacv1.Role{ObjectMeta: r.objectMeta(ps), Rules: serverRoleRules(ps)}
	if _, _, err := applyServerObject(ctx, r.Client, ps, role); err != nil {
		return fmt.Errorf("Role: %w", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: r.objectMeta(ps),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serverServiceAccount(ps), Namespace: r.Options.Namespace}},
	}
	// roleRef cannot be changed: a binding to another role is deleted and made again.
	have := &rbacv1.RoleBinding{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(rb), have)
	if err == nil && have.RoleRef != rb.RoleRef {
		err = client.IgnoreNotFound(r.Client.Delete(ctx, have, client.Preconditions{UID: &have.UID}))
	}
	if err == nil || apierrors.IsNotFound(err) {
		_, _, err = applyServerObject(ctx, r.Client, ps, rb)
	}
	if err != nil {
		return fmt.Errorf("RoleBinding: %w", err)
	}
	return nil
}
