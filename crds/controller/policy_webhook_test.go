package controller

import (
	"errors"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

func TestRenderWebhook(t *testing.T) {
	o := Options{Namespace: testNS}
	rules := []v1.RuleWithOperations{{
		Operations: []v1.OperationType{"CREATE", "UPDATE"}, APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"},
		Scope: ptr.To(v1.ScopeType("Cluster")),
	}}
	spec := v1.WebhookSpec{
		PolicyServer:    "edge",
		Rules:           rules,
		MatchConditions: []v1.MatchCondition{{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"}},
		ObjectSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		FailurePolicy:   ptr.To(v1.FailurePolicyType("Ignore")),
		TimeoutSeconds:  ptr.To(int32(5)),
	}
	userSel := &metav1.LabelSelector{
		MatchLabels:      map[string]string{"env": "prod"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}},
	}
	notController := metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{testNS}}

	capol := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	capol.Spec.WebhookSpec = spec
	capol.Spec.NamespaceSelector = userSel
	capInside := capol.DeepCopy()
	capInside.Spec.AllowInsideAdmissionControllerNamespace = true
	capMut := capol.DeepCopy()
	capMut.Spec.Mutating = true
	capNoSel := capol.DeepCopy()
	capNoSel.Spec.NamespaceSelector = nil
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a"}}
	ap.Spec.WebhookSpec = spec
	capg := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	capg.Spec.WebhookSpec = spec
	apg := &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "g"}}
	apg.Spec.WebhookSpec = spec

	tests := []struct {
		name     string
		p        v1.Policy
		id       string
		mutating bool
		nsSel    *metav1.LabelSelector
		scope    admv1.ScopeType
	}{
		{"ClusterAdmissionPolicy", capol, "clusterwide-c", false, &metav1.LabelSelector{
			MatchLabels:      map[string]string{"env": "prod"},
			MatchExpressions: []metav1.LabelSelectorRequirement{notController, userSel.MatchExpressions[0]},
		}, admv1.ClusterScope},
		{"inside the controller namespace", capInside, "clusterwide-c", false, userSel, admv1.ClusterScope},
		{"mutating", capMut, "clusterwide-c", true, &metav1.LabelSelector{
			MatchLabels:      map[string]string{"env": "prod"},
			MatchExpressions: []metav1.LabelSelectorRequirement{notController, userSel.MatchExpressions[0]},
		}, admv1.ClusterScope},
		{"no selector", capNoSel, "clusterwide-c", false, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notController}}, admv1.ClusterScope},
		{"AdmissionPolicy", ap, "namespaced-team-a", false, &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team"}}, admv1.NamespacedScope},
		{"ClusterAdmissionPolicyGroup", capg, "clusterwide-group-g", false, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notController}}, admv1.ClusterScope},
		{"AdmissionPolicyGroup", apg, "namespaced-group-team-g", false, &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team"}}, admv1.NamespacedScope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := v1.PolicyID(tt.p.PolicyKind(), tt.p.GetNamespace(), tt.p.GetName())
			if id != tt.id {
				t.Fatalf("id %s, want %s", id, tt.id)
			}
			obj := renderWebhook(tt.p, id, o, []byte("PEM"), "sha256:e")
			if obj.GetName() != tt.id || len(obj.GetOwnerReferences()) != 0 {
				t.Errorf("name %s, owners %v", obj.GetName(), obj.GetOwnerReferences())
			}
			wantLabels := map[string]string{v1.LabelPartOf: "tollgate", v1.PolicyServerLabel: "edge"}
			if !equality.Semantic.DeepEqual(obj.GetLabels(), wantLabels) {
				t.Errorf("labels %v", obj.GetLabels())
			}
			an := obj.GetAnnotations()
			if an[v1.PolicyNameAnnotation] != tt.p.GetName() || an[v1.PolicyNamespaceAnnotation] != tt.p.GetNamespace() {
				t.Errorf("annotations %v", an)
			}
			var w admv1.ValidatingWebhook
			switch c := obj.(type) {
			case *admv1.ValidatingWebhookConfiguration:
				if tt.mutating {
					t.Fatal("validating configuration for a mutating policy")
				}
				w = c.Webhooks[0]
			case *admv1.MutatingWebhookConfiguration:
				if !tt.mutating {
					t.Fatal("mutating configuration for a validating policy")
				}
				m := c.Webhooks[0]
				if m.ReinvocationPolicy == nil || *m.ReinvocationPolicy != admv1.NeverReinvocationPolicy {
					t.Errorf("reinvocationPolicy %v", m.ReinvocationPolicy)
				}
				w = admv1.ValidatingWebhook{Name: m.Name, ClientConfig: m.ClientConfig, Rules: m.Rules, FailurePolicy: m.FailurePolicy,
					MatchPolicy: m.MatchPolicy, NamespaceSelector: m.NamespaceSelector, ObjectSelector: m.ObjectSelector,
					SideEffects: m.SideEffects, TimeoutSeconds: m.TimeoutSeconds, AdmissionReviewVersions: m.AdmissionReviewVersions,
					MatchConditions: m.MatchConditions}
			}
			want := admv1.ValidatingWebhook{
				Name: tt.id + ".policies.tollgate.dev",
				ClientConfig: admv1.WebhookClientConfig{
					Service:  &admv1.ServiceReference{Namespace: testNS, Name: "policy-server-edge", Path: ptr.To("/validate/" + tt.id), Port: ptr.To(int32(443))},
					CABundle: []byte("PEM"),
				},
				Rules: []admv1.RuleWithOperations{{
					Operations: []admv1.OperationType{"CREATE", "UPDATE"},
					Rule:       admv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}, Scope: ptr.To(tt.scope)},
				}},
				FailurePolicy:           ptr.To(admv1.Ignore),
				MatchPolicy:             ptr.To(admv1.Equivalent),
				NamespaceSelector:       tt.nsSel,
				ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				SideEffects:             ptr.To(admv1.SideEffectClassNone),
				TimeoutSeconds:          ptr.To(int32(5)),
				AdmissionReviewVersions: []string{"v1"},
				MatchConditions:         []admv1.MatchCondition{{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"}},
			}
			if !equality.Semantic.DeepEqual(w, want) {
				t.Errorf("webhook\n got %+v\nwant %+v", w, want)
			}
		})
	}
	// The user's selector is not modified in place.
	if len(userSel.MatchExpressions) != 1 {
		t.Fatalf("user selector modified: %+v", userSel)
	}
}

func TestRenderWebhookDefaults(t *testing.T) {
	p := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "d"}}
	p.Spec.PolicyServer = "default"
	p.Spec.Rules = []v1.RuleWithOperations{{Operations: []v1.OperationType{"*"}, APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	w := renderWebhook(p, "clusterwide-d", Options{Namespace: testNS}, nil, "").(*admv1.ValidatingWebhookConfiguration).Webhooks[0]
	if *w.FailurePolicy != admv1.Fail || *w.MatchPolicy != admv1.Equivalent || *w.SideEffects != admv1.SideEffectClassNone ||
		*w.TimeoutSeconds != 10 || *w.Rules[0].Scope != admv1.AllScopes || w.ObjectSelector == nil || w.MatchConditions != nil {
		t.Fatalf("defaults %+v", w)
	}
}

func TestApplyWebhookWritesOnlyChanges(t *testing.T) {
	p := cap1("apply")
	e := newEnv(t)
	desired := func(ca string) client.Object {
		return renderWebhook(p, "clusterwide-apply", Options{Namespace: testNS}, []byte(ca), "sha256:e")
	}
	for i, step := range []struct {
		ca    string
		wrote bool
	}{{"A", true}, {"A", false}, {"B", true}, {"B", false}} {
		wrote, err := applyWebhook(e.ctx, e.c, p, desired(step.ca))
		if err != nil || wrote != step.wrote {
			t.Fatalf("step %d: wrote %v, err %v; want wrote %v", i, wrote, err, step.wrote)
		}
	}
	// Configurations of the same name that are not the policy's are neither taken over nor
	// deleted: another program's, and another policy's whose id is the same.
	q := cap1("group-x")
	g := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	g.Spec.PolicyServer = "default"
	foreign := &admv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterwide-foreign"}}
	if err := e.c.Create(e.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(e.ctx, renderWebhook(q, "clusterwide-group-x", Options{Namespace: testNS}, nil, "")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		p  v1.Policy
		id string
	}{{p, "clusterwide-foreign"}, {g, "clusterwide-group-x"}} {
		if deleted, err := deleteWebhooks(e.ctx, e.c, tt.p, tt.id, nil); err != nil || deleted {
			t.Errorf("%s: deleted %v, err %v", tt.id, deleted, err)
		}
		if w, err := getWebhook(e.ctx, e.c, tt.p, tt.id); err != nil || w != nil {
			t.Errorf("%s: found %v, err %v", tt.id, w, err)
		}
		if _, err := applyWebhook(e.ctx, e.c, tt.p, renderWebhook(tt.p, tt.id, Options{Namespace: testNS}, nil, "")); !errors.Is(err, ErrForeignWebhook) {
			t.Errorf("%s: apply: %v", tt.id, err)
		}
	}
	if deleted, err := deleteWebhooks(e.ctx, e.c, q, "clusterwide-group-x", nil); err != nil || !deleted {
		t.Errorf("own webhook: deleted %v, err %v", deleted, err)
	}
}

// TestWebhookSkipsNamespaces: cluster-wide policies leave out the controller's namespace and the
// skipped namespaces (kube-system and kube-node-lease by default) unless they include them;
// namespaced policies see their namespace whatever is skipped.
func TestWebhookSkipsNamespaces(t *testing.T) {
	o, err := Options{Namespace: testNS}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	notIn := func(ns ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: ns}}}
	}
	capol := func(inside bool, include ...string) *v1.ClusterAdmissionPolicy {
		p := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
		p.Spec.AllowInsideAdmissionControllerNamespace = inside
		p.Spec.IncludeSkippedNamespaces = include
		return p
	}
	capg := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	capg.Spec.IncludeSkippedNamespaces = []string{"kube-node-lease"}
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "a"}}
	for _, tc := range []struct {
		name string
		p    v1.Policy
		o    Options
		want *metav1.LabelSelector
	}{
		{"defaults", capol(false), o, notIn(testNS, "kube-system", "kube-node-lease")},
		{"kube-system included", capol(false, "kube-system"), o, notIn(testNS, "kube-node-lease")},
		{"a namespace that is not skipped changes nothing", capol(false, "shop"), o, notIn(testNS, "kube-system", "kube-node-lease")},
		{"inside the controller's namespace", capol(true), o, notIn("kube-system", "kube-node-lease")},
		{"everything included", capol(true, "kube-node-lease", "kube-system"), o, &metav1.LabelSelector{}},
		{"group", capg, o, notIn(testNS, "kube-system")},
		{"nothing skipped", capol(false), Options{Namespace: testNS, SkipNamespaces: []string{}}, notIn(testNS)},
		{"the controller's namespace skipped too", capol(true), Options{Namespace: testNS, SkipNamespaces: []string{testNS, "infra"}}, notIn(testNS, "infra")},
		{"a namespaced policy in a skipped namespace", ap, o, &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := webhookNamespaceSelector(tc.p, tc.o); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("namespaceSelector %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		skip []string
		err  string
	}{
		{[]string{"kube-system", "Kube_System"}, `skip-namespaces: "Kube_System" is not a namespace name`},
		{[]string{""}, `skip-namespaces: "" is not a namespace name`},
	} {
		if _, err := (Options{Namespace: testNS, SkipNamespaces: tc.skip}).withDefaults(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("SkipNamespaces %q: err %v, want %q", tc.skip, err, tc.err)
		}
	}
}
