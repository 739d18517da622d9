package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// TestSecurityDefaults checks the operator's safe defaults against the real apiserver, with a
// `tollgate controller` process (default flags) and a policy server pod on the node:
//
//   - a cluster-wide policy leaves kube-system out (its webhook's namespaceSelector), so a
//     ConfigMap it would deny is admitted there and denied in another namespace, until the policy
//     names kube-system in spec.includeSkippedNamespaces;
//   - a tenant's AdmissionPolicy gets no host capability unless the PolicyServer's
//     namespacedPoliciesCapabilities lists it, and a file:// module is refused (InvalidPolicy,
//     left out of policies.yml: the server never probes the file).
func TestSecurityDefaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	const ns, psName, tenant = "tollgate-sec", "sec", "sec-tenant"
	f := startFleet(t, ctx, ns)
	cs := env.cluster.Client
	if err := ensureNamespace(ctx, cs, tenant); err != nil {
		t.Fatal(err)
	}
	ps := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.tollgate.dev/v1", "kind": "PolicyServer",
		"metadata": map[string]any{"name": psName},
		"spec":     map[string]any{"image": env.image, "replicas": int64(1), "insecureSources": []any{cluster.PodRegistryHost}},
	}}
	psRes := f.dyn.Resource(policyGVR["PolicyServer"])
	if _, err := psRes.Create(ctx, ps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	capRes := f.dyn.Resource(policyGVR["ClusterAdmissionPolicy"])
	apRes := f.dyn.Resource(policyGVR["AdmissionPolicy"]).Namespace(tenant)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = capRes.Delete(ctx, "sec-owner", metav1.DeleteOptions{})
		_ = apRes.Delete(ctx, "sec-files", metav1.DeleteOptions{})
		_ = apRes.Delete(ctx, "sec-labels", metav1.DeleteOptions{})
		// The policies' finalizers go before the controller stops (cleanups run last first).
		_ = poll(ctx, time.Minute, 500*time.Millisecond, func() error {
			for _, n := range []string{"sec-files", "sec-labels"} {
				if _, err := apRes.Get(ctx, n, metav1.GetOptions{}); err == nil {
					return fmt.Errorf("AdmissionPolicy %s left", n)
				}
			}
			if _, err := capRes.Get(ctx, "sec-owner", metav1.GetOptions{}); err == nil {
				return fmt.Errorf("ClusterAdmissionPolicy sec-owner left")
			}
			return nil
		})
		_ = psRes.Delete(ctx, psName, metav1.DeleteOptions{})
		_ = poll(ctx, time.Minute, 500*time.Millisecond, func() error {
			if _, err := psRes.Get(ctx, psName, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("PolicyServer %s left", psName)
			}
			return nil
		})
	})
	if _, err := waitServerPods(ctx, cs, ns, "policy-server-"+psName, 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	labels := policyRef(t, "required-labels")
	// Only ConfigMaps labelled probe=true are sent to the policies: nothing else in kube-system
	// (or anywhere) is touched by this test.
	probeSel := map[string]any{"matchLabels": map[string]any{"e2e.tollgate.dev/probe": "true"}}
	rules := []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"}, "operations": []any{"CREATE"}}}
	probe := func(namespace string) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: namespace,
			Labels: map[string]string{"e2e.tollgate.dev/probe": "true"}}}
		created, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			_ = cs.CoreV1().ConfigMaps(namespace).Delete(ctx, created.Name, metav1.DeleteOptions{})
		}
		return err
	}
	denied := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "denied the request") && strings.Contains(err.Error(), "owner")
	}

	t.Run("kube-system is skipped unless included", func(t *testing.T) {
		capol := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policies.tollgate.dev/v1", "kind": "ClusterAdmissionPolicy",
			"metadata": map[string]any{"name": "sec-owner"},
			"spec": map[string]any{
				"policyServer": psName, "module": labels, "mutating": false, "rules": rules,
				"settings":       map[string]any{"mandatory_labels": []any{"owner"}},
				"objectSelector": probeSel,
				"namespaceSelector": map[string]any{"matchExpressions": []any{map[string]any{
					"key": "kubernetes.io/metadata.name", "operator": "In", "values": []any{"kube-system", tenant}}}},
			},
		}}
		if _, err := capRes.Create(ctx, capol, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPolicy(t, ctx, f, "ClusterAdmissionPolicy", "", "sec-owner", "active", "", 2*time.Minute)
		// The webhook is registered once every replica serves the policy; the apiserver may take
		// a moment to call it.
		eventually(t, 30*time.Second, func() error {
			if err := probe(tenant); !denied(err) {
				return fmt.Errorf("a ConfigMap without an owner label in %s: %v, want the policy's denial", tenant, err)
			}
			return nil
		})
		if err := probe("kube-system"); err != nil {
			t.Errorf("a ConfigMap in kube-system: %v, want it admitted (kube-system is skipped)", err)
		}
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterwide-sec-owner", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sel := vwc.Webhooks[0].NamespaceSelector
		if len(sel.MatchExpressions) != 2 || sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpNotIn ||
			!slices.Equal(sel.MatchExpressions[0].Values, []string{ns, "kube-system", "kube-node-lease"}) {
			t.Errorf("namespaceSelector %+v, want NotIn [%s kube-system kube-node-lease] first", sel, ns)
		}

		patch := []byte(`{"spec":{"includeSkippedNamespaces":["kube-system"]}}`)
		if _, err := capRes.Patch(ctx, "sec-owner", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			if err := probe("kube-system"); !denied(err) {
				return fmt.Errorf("with includeSkippedNamespaces [kube-system], a ConfigMap in kube-system: %v, want the policy's denial", err)
			}
			return nil
		})
		if err := capRes.Delete(ctx, "sec-owner", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error { return probe("kube-system") })
	})

	t.Run("a tenant's policy gets no capability and no file://", func(t *testing.T) {
		ap := func(name, module string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "policies.tollgate.dev/v1", "kind": "AdmissionPolicy",
				"metadata": map[string]any{"name": name, "namespace": tenant},
				"spec": map[string]any{
					"policyServer": psName, "module": module, "mutating": false, "rules": rules,
					"settings": map[string]any{"mandatory_labels": []any{"owner"}}, "objectSelector": probeSel,
				},
			}}
		}
		for _, p := range []*unstructured.Unstructured{ap("sec-files", "file:///etc/passwd"), ap("sec-labels", labels)} {
			if _, err := apRes.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitPolicy(t, ctx, f, "AdmissionPolicy", tenant, "sec-labels", "active", "", 2*time.Minute)
		waitPolicy(t, ctx, f, "AdmissionPolicy", tenant, "sec-files", "scheduled", "may never use file:// modules", time.Minute)
		capsOf := func() (map[string][]string, error) {
			cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "policy-server-"+psName, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			var doc map[string]struct {
				HostCapabilities []string `json:"hostCapabilities"`
			}
			if err := json.Unmarshal([]byte(cm.Data["policies.yml"]), &doc); err != nil {
				return nil, err
			}
			out := map[string][]string{}
			for id, e := range doc {
				out[id] = e.HostCapabilities
			}
			return out, nil
		}
		caps, err := capsOf()
		if err != nil {
			t.Fatal(err)
		}
		const labelsID, filesID = "namespaced-" + tenant + "-sec-labels", "namespaced-" + tenant + "-sec-files"
		if c, ok := caps[labelsID]; !ok || c == nil || len(c) != 0 {
			t.Errorf("policies.yml: %s hostCapabilities %q (present %v), want [] (none)", labelsID, c, ok)
		}
		if _, ok := caps[filesID]; ok {
			t.Errorf("policies.yml holds %s: a tenant's file:// module reached the server", filesID)
		}
		// The PolicyServer grants oci/* to its tenants: the entry follows.
		patch := []byte(`{"spec":{"namespacedPoliciesCapabilities":["oci/*"]}}`)
		if _, err := psRes.Patch(ctx, psName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			caps, err := capsOf()
			if err != nil {
				return err
			}
			if c := caps[labelsID]; !slices.Equal(c, []string{"oci/*"}) {
				return fmt.Errorf("%s hostCapabilities %q, want [oci/*]", labelsID, c)
			}
			return nil
		})
		eventually(t, 30*time.Second, func() error {
			if err := probe(tenant); !denied(err) {
				return fmt.Errorf("a ConfigMap without an owner label in %s: %v, want the tenant policy's denial", tenant, err)
			}
			return nil
		})
	})
}

// waitPolicy waits until a policy's status.policyStatus is want and, when msg is set, its
// PolicyActive message contains msg.
func waitPolicy(t *testing.T, ctx context.Context, f *fleet, kind, namespace, name, want, msg string, timeout time.Duration) {
	t.Helper()
	err := poll(ctx, timeout, 250*time.Millisecond, func() error {
		o, err := f.dyn.Resource(policyGVR[kind]).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return err
		}
		if err != nil {
			return err
		}
		st, _, _ := unstructured.NestedString(o.Object, "status", "policyStatus")
		conds := conditionMessages(o)
		if st != want || !strings.Contains(conds, msg) {
			return fmt.Errorf("%s %s/%s: %q (%s), want %q with %q", kind, namespace, name, st, conds, want, msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
