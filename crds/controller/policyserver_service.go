package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// serviceWebhookPortNumber is the Service port of the webhook, the port every webhook
// configuration calls.
const serviceWebhookPortNumber = 443

// desiredService returns ps's Service: port ServicePortWebhook (443) to the webhook port, and
// ServicePortReadiness to the probe port (where the controller asks GET /policies).
func (r *PolicyServerReconciler) desiredService(ps *v1.PolicyServer) *corev1.Service {
	webhook, readiness := serverPorts(ps)
	svc := &corev1.Service{ObjectMeta: r.objectMeta(ps)}
	svc.Spec = corev1.ServiceSpec{
		Type:     corev1.ServiceTypeClusterIP,
		Selector: map[string]string{v1.LabelAppSelector: v1.PolicyServerAppLabel(ps.Name)},
		Ports: []corev1.ServicePort{
			{Name: v1.ServicePortWebhook, Port: serviceWebhookPortNumber, TargetPort: intstr.FromInt32(webhook), Protocol: corev1.ProtocolTCP},
			{Name: v1.ServicePortReadiness, Port: readiness, TargetPort: intstr.FromInt32(readiness), Protocol: corev1.ProtocolTCP},
		},
	}
	return svc
}

// reconcileService keeps the Service's type, selector and ports; the fields the apiserver
// allocates (cluster IPs) are not the controller's.
func (r *PolicyServerReconciler) reconcileService(ctx context.Context, ps *v1.PolicyServer) error {
	if _, _, err := applyServerObject(ctx, r.Client, ps, r.desiredService(ps)); err != nil {
		return fmt.Errorf("Service: %w", err)
	}
	return nil
}

// serverPorts returns the webhook and probe ports of ps (the CRD's defaults when unset).
func serverPorts(ps *v1.PolicyServer) (webhook, readiness int32) {
	webhook, readiness = v1.PolicyServerDefaultWebhookPort, v1.PolicyServerDefaultReadinessPort
	if p := ps.Spec.WebhookPort; p != nil {
		webhook = *p
	}
	if p := ps.Spec.ReadinessProbePort; p != nil {
		readiness = *p
	}
	return webhook, readiness
}
