package audit

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// webhook is what the audit takes from a policy's registered webhook configuration.
type webhook struct {
	// caBundle verifies the policy server (the operator's CA, and the previous one while valid).
	caBundle []byte
	// namespaceSelector is the one the apiserver applies: the policy's, combined by the operator
	// with what it leaves out (its own namespace, skipped namespaces), so that an audit sees the
	// namespaces admission sees.
	namespaceSelector *metav1.LabelSelector
}

// loadWebhooks reads each policy's webhook configuration (named after its id; Mutating for a
// mutating policy). A policy without one keeps its spec's selectors.
func loadWebhooks(ctx context.Context, c client.Reader, policies []*Policy) error {
	for _, p := range policies {
		key := client.ObjectKey{Name: p.ID}
		var ca []byte
		var sel *metav1.LabelSelector
		var err error
		found := false
		if p.Object.IsMutating() {
			var m admissionregistrationv1.MutatingWebhookConfiguration
			if err = c.Get(ctx, key, &m); err == nil && len(m.Webhooks) > 0 {
				ca, sel, found = m.Webhooks[0].ClientConfig.CABundle, m.Webhooks[0].NamespaceSelector, true
			}
		} else {
			var v admissionregistrationv1.ValidatingWebhookConfiguration
			if err = c.Get(ctx, key, &v); err == nil && len(v.Webhooks) > 0 {
				ca, sel, found = v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].NamespaceSelector, true
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the webhook configuration %s: %w", p.ID, err)
		}
		if found {
			p.webhook = &webhook{caBundle: ca, namespaceSelector: sel}
		}
	}
	return nil
}
