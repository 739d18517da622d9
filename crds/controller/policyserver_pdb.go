package controller

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// reconcilePDB keeps a PodDisruptionBudget when spec.minAvailable or spec.maxUnavailable is
// set, and deletes the one it made otherwise.
func (r *PolicyServerReconciler) reconcilePDB(ctx context.Context, ps *v1.PolicyServer) error {
	want := &policyv1.PodDisruptionBudget{ObjectMeta: r.objectMeta(ps)}
	if ps.Spec.MinAvailable == nil && ps.Spec.MaxUnavailable == nil {
		have := &policyv1.PodDisruptionBudget{}
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
		if err != nil {
			return client.IgnoreNotFound(err)
		}
		if !metav1.IsControlledBy(have, ps) {
			return nil
		}
		if err := r.Client.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("PodDisruptionBudget: deleting: %w", err)
		}
		return nil
	}
	want.Spec = policyv1.PodDisruptionBudgetSpec{
		MinAvailable:   ps.Spec.MinAvailable,
		MaxUnavailable: ps.Spec.MaxUnavailable,
		Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{v1.LabelAppSelector: v1.PolicyServerAppLabel(ps.Name)}},
	}
	_, _, err := applyServerObject(ctx, r.Client, ps, want)
	if err != nil {
		return fmt.Errorf("PodDisruptionBudget: %w", err)
	}
	return nil
}
