package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// policyEntryDigestAnnotation, on a policy's webhook configuration, is the digest of the
// policies.yml entry that every replica served when the webhook was last written: a policy
// whose entry has not changed since stays active while its servers catch up with changes to
// other policies of the same server.
const policyEntryDigestAnnotation = "tollgate.dev/policy-entry-digest"

// Defaults the apiserver would give the webhook's fields: the rendered configuration carries
// them all, so that it compares equal to what the apiserver returns and an unchanged policy
// is never written again.
const (
	defaultTimeoutSeconds int32 = 10
	serviceWebhookPort    int32 = 443
)

// renderWebhook returns the policy's webhook configuration: a MutatingWebhookConfiguration when
// the policy mutates, a ValidatingWebhookConfiguration otherwise, named id, with one webhook
// that sends the requests the policy selects to /validate/<id> on its policy server's Service.
func renderWebhook(p v1.Policy, id string, o Options, caBundle []byte, entryDigest string) client.Object {
	spec := p.Webhook()
	meta := metav1.ObjectMeta{
		Name: id,
		Labels: map[string]string{
			v1.LabelPartOf:       v1.PartOfLabelValue,
			v1.PolicyServerLabel: spec.PolicyServer,
		},
		Annotations: map[string]string{
			v1.PolicyNameAnnotation: p.GetName(),
		},
	}
	if p.GetNamespace() != "" {
		meta.Annotations[v1.PolicyNamespaceAnnotation] = p.GetNamespace()
	}
	if entryDigest != "" {
		meta.Annotations[policyEntryDigestAnnotation] = entryDigest
	}
	path := "/validate/" + id
	cc := admv1.WebhookClientConfig{
		Service: &admv1.ServiceReference{
			Namespace: o.Namespace,
			Name:      v1.PolicyServerObjectName(spec.PolicyServer),
			Path:      &path,
			Port:      ptr.To(serviceWebhookPort),
		},
		CABundle: append([]byte(nil), caBundle...),
	}
	failure := admv1.Fail
	if spec.FailurePolicy != nil {
		failure = admv1.FailurePolicyType(*spec.FailurePolicy)
	}
	match := admv1.Equivalent
	if spec.MatchPolicy != nil {
		match = admv1.MatchPolicyType(*spec.MatchPolicy)
	}
	side := admv1.SideEffectClassNone
	if spec.SideEffects != nil {
		side = admv1.SideEffectClass(*spec.SideEffects)
	}
	timeout := defaultTimeoutSeconds
	if spec.TimeoutSeconds != nil {
		timeout = *spec.TimeoutSeconds
	}
	objSel := &metav1.LabelSelector{}
	if spec.ObjectSelector != nil {
		objSel = spec.ObjectSelector.DeepCopy()
	}
	rules := webhookRules(p)
	nsSel := webhookNamespaceSelector(p, o)
	conds := webhookMatchConditions(spec.MatchConditions)
	versions := []string{"v1"}

	if p.IsMutating() {
		return &admv1.MutatingWebhookConfiguration{
			ObjectMeta: meta,
			Webhooks: []admv1.MutatingWebhook{{
				Name:                    v1.WebhookName(id),
				ClientConfig:            cc,
				Rules:                   rules,
				FailurePolicy:           &failure,
				MatchPolicy:             &match,
				NamespaceSelector:       nsSel,
				ObjectSelector:          objSel,
				SideEffects:             &side,
				TimeoutSeconds:          &timeout,
				AdmissionReviewVersions: versions,
				ReinvocationPolicy:      ptr.To(admv1.NeverReinvocationPolicy),
				MatchConditions:         conds,
			}},
		}
	}
	return &admv1.ValidatingWebhookConfiguration{
		ObjectMeta: meta,
		Webhooks: []admv1.ValidatingWebhook{{
			Name:                    v1.WebhookName(id),
			ClientConfig:            cc,
			Rules:                   rules,
			FailurePolicy:           &failure,
			MatchPolicy:             &match,
			NamespaceSelector:       nsSel,
			ObjectSelector:          objSel,
			SideEffects:             &side,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: versions,
			MatchConditions:         conds,
		}},
	}
}

// webhookRules converts the policy's rules; a namespaced policy's rules are forced to the
// Namespaced scope, and a missing scope is the apiserver's default "*".
func webhookRules(p v1.Policy) []admv1.RuleWithOperations {
	spec := p.Webhook()
	rules := make([]admv1.RuleWithOperations, 0, len(spec.Rules))
	for _, r := range spec.Rules {
		scope := admv1.AllScopes
		if r.Scope != nil {
			scope = admv1.ScopeType(*r.Scope)
		}
		if p.IsNamespaced() {
			scope = admv1.NamespacedScope
		}
		ops := make([]admv1.OperationType, len(r.Operations))
		for i, op := range r.Operations {
			ops[i] = admv1.OperationType(op)
		}
		rules = append(rules, admv1.RuleWithOperations{
			Operations: ops,
			Rule: admv1.Rule{
				APIGroups:   append([]string(nil), r.APIGroups...),
				APIVersions: append([]string(nil), r.APIVersions...),
				Resources:   append([]string(nil), r.Resources...),
				Scope:       &scope,
			},
		})
	}
	return rules
}

// webhookNamespaceSelector: a namespaced policy sees its own namespace only; a cluster-wide one
// sees the namespaces its selector selects (every one without a selector), leaving out the
// controller's namespace unless it allows itself inside, and the skipped namespaces
// (Options.SkipNamespaces) but those it includes. Unlike Kubewarden, the user's matchLabels
// are kept next to the added expression.
func webhookNamespaceSelector(p v1.Policy, o Options) *metav1.LabelSelector {
	if p.IsNamespaced() {
		return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: p.GetNamespace()}}
	}
	user, allowInside := p.Selector()
	sel := &metav1.LabelSelector{}
	if user != nil {
		sel = user.DeepCopy()
	}
	var out []string
	if !allowInside {
		out = append(out, o.Namespace)
	}
	included := p.IncludedSkippedNamespaces()
	for _, ns := range o.SkipNamespaces {
		if !slices.Contains(included, ns) && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	if len(out) == 0 {
		return sel
	}
	sel.MatchExpressions = append([]metav1.LabelSelectorRequirement{{
		Key:      corev1.LabelMetadataName,
		Operator: metav1.LabelSelectorOpNotIn,
		Values:   out,
	}}, sel.MatchExpressions...)
	return sel
}

func webhookMatchConditions(in []v1.MatchCondition) []admv1.MatchCondition {
	if len(in) == 0 {
		return nil
	}
	out := make([]admv1.MatchCondition, len(in))
	for i, c := range in {
		out[i] = admv1.MatchCondition{Name: c.Name, Expression: c.Expression}
	}
	return out
}

// webhookObjects returns empty objects of both webhook configuration kinds.
func webhookObjects() []client.Object {
	return []client.Object{&admv1.ValidatingWebhookConfiguration{}, &admv1.MutatingWebhookConfiguration{}}
}

// ErrForeignWebhook: a webhook configuration of the policy's name exists that is not the
// policy's (another program's, or another policy's whose id is the same).
var ErrForeignWebhook = errors.New("a webhook configuration of that name exists and is not the policy's")

// applyWebhook applies desired (server-side, FieldOwner) unless the configuration of its kind
// and name already holds it, and reports whether it wrote. It does not take over a
// configuration that is not p's.
func applyWebhook(ctx context.Context, c client.Client, p v1.Policy, desired client.Object) (bool, error) {
	var existing client.Object
	switch desired.(type) {
	case *admv1.ValidatingWebhookConfiguration:
		existing = &admv1.ValidatingWebhookConfiguration{}
	case *admv1.MutatingWebhookConfiguration:
		existing = &admv1.MutatingWebhookConfiguration{}
	}
	err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		existing = nil
	} else if err != nil {
		return false, err
	} else if !webhookOf(existing, p) {
		return false, fmt.Errorf("%w: %T %s", ErrForeignWebhook, existing, desired.GetName())
	}
	return applyOwned(ctx, c, desired, existing)
}

// getWebhook returns the policy's existing webhook configuration of either kind (the one of
// the policy's current kind first), or nil.
func getWebhook(ctx context.Context, c client.Client, p v1.Policy, id string) (client.Object, error) {
	objs := webhookObjects()
	if p.IsMutating() {
		objs[0], objs[1] = objs[1], objs[0]
	}
	for _, obj := range objs {
		err := c.Get(ctx, client.ObjectKey{Name: id}, obj)
		if err == nil {
			if webhookOf(obj, p) {
				return obj, nil
			}
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, nil
}

// deleteWebhooks deletes the policy's configurations named id of both kinds, or only of the
// kind that is not keep's (after a flip of mutating). Configurations of that name that are not
// the policy's are left alone. It reports whether it deleted anything.
func deleteWebhooks(ctx context.Context, c client.Client, p v1.Policy, id string, keep client.Object) (bool, error) {
	deleted := false
	for _, obj := range webhookObjects() {
		if keep != nil && reflect.TypeOf(obj) == reflect.TypeOf(keep) {
			continue
		}
		if err := c.Get(ctx, client.ObjectKey{Name: id}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return deleted, err
		}
		if !webhookOf(obj, p) {
			continue
		}
		if err := c.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			return deleted, fmt.Errorf("deleting %T %s: %w", obj, id, err)
		}
		deleted = true
	}
	return deleted, nil
}

// ownedWebhook tells tollgate's webhook configurations from others of the same name.
func ownedWebhook(obj client.Object) bool {
	return obj.GetLabels()[v1.LabelPartOf] == v1.PartOfLabelValue
}

// webhookOf tells whether obj is p's webhook configuration: tollgate's, annotated with p's
// name and namespace (two policies whose ids collide do not touch each other's).
func webhookOf(obj client.Object, p v1.Policy) bool {
	an := obj.GetAnnotations()
	return ownedWebhook(obj) && an[v1.PolicyNameAnnotation] == p.GetName() && an[v1.PolicyNamespaceAnnotation] == p.GetNamespace()
}
