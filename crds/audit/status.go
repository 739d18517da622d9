package audit

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// auditStatusPatch is the JSON merge patch that sets status.audit of a policy and nothing else
// (the operator owns the rest of status).
func auditStatusPatch(s *Summary, id string) ([]byte, error) {
	c := Counts{}
	if pc := s.ByPolicy[id]; pc != nil {
		c = *pc
	}
	st := v1.PolicyAuditStatus{
		LastAuditTime: metav1.NewTime(s.End),
		Violations:    int32(c.Fail),
		Errors:        int32(c.Error),
		Passed:        int32(c.Pass),
	}
	return json.Marshal(map[string]any{"status": map[string]any{"audit": st}})
}

// writeAuditStatus patches status.audit of every audited policy, through the status
// subresource. A policy deleted meanwhile is no failure.
func writeAuditStatus(ctx context.Context, c client.Client, policies []*Policy, s *Summary) []error {
	var errs []error
	for _, p := range policies {
		b, err := auditStatusPatch(s, p.ID)
		if err == nil {
			err = c.Status().Patch(ctx, p.Object, client.RawPatch(types.MergePatchType, b))
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("writing status.audit of %s %s: %w", p.Object.PolicyKind(), client.ObjectKeyFromObject(p.Object), err))
		}
	}
	return errs
}
