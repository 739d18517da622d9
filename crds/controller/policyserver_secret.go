package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// Keys of the certificate Secret (those of kubernetes.io/tls, in an Opaque Secret as
// Kubewarden's).
const (
	TLSCertKey = corev1.TLSCertKey
	TLSKeyKey  = corev1.TLSPrivateKeyKey
)

// reconcileSecret keeps ps's certificate and key (from the CertManager) in its Secret, mounted
// at CertMountPath; the server reloads them when they change. It returns when the certificate
// needs another look.
func (r *PolicyServerReconciler) reconcileSecret(ctx context.Context, ps *v1.PolicyServer) (time.Duration, error) {
	sec := &corev1.Secret{ObjectMeta: r.objectMeta(ps), Type: corev1.SecretTypeOpaque}
	have := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(sec), have); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("Secret: %w", err)
	}
	crt, key, issued, recheck, err := r.Certs.ServerCert(ctx, ps.Name, have.Data[TLSCertKey], have.Data[TLSKeyKey])
	if err != nil {
		return 0, fmt.Errorf("Secret: certificate: %w", err)
	}
	sec.Data = map[string][]byte{TLSCertKey: crt, TLSKeyKey: key}
	if _, _, err := applyServerObject(ctx, r.Client, ps, sec); err != nil {
		return 0, fmt.Errorf("Secret: %w", err)
	}
	if issued {
		r.Recorder.Eventf(ps, corev1.EventTypeNormal, EventReasonCertificateIssued, "certificate for %s issued", v1.ServiceHost(ps.Name, r.Options.Namespace))
	}
	return recheck, nil
}
