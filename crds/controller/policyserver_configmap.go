package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// serverConfig is what reconcileConfigMap wrote.
type serverConfig struct {
	digest   string
	policies int
	skipped  map[string]error
	// policiesYML is the policies.yml written (for the context-aware RBAC).
	policiesYML []byte
}

// message is the ConfigMapReconciled condition's message.
func (c serverConfig) message() string {
	if c.digest == "" {
		return ""
	}
	msg := fmt.Sprintf("policies.yml %s: %d policies", c.digest, c.policies)
	if len(c.skipped) > 0 {
		ids := slices.Sorted(maps.Keys(c.skipped))
		msg += fmt.Sprintf("; left out (the server would refuse them): %s", strings.Join(ids, ", "))
	}
	return msg
}

// boundPolicies returns the policies of every kind bound to PolicyServer ps and not being
// deleted.
func boundPolicies(ctx context.Context, c client.Reader, ps string) ([]v1.Policy, error) {
	var out []v1.Policy
	var (
		caps  v1.ClusterAdmissionPolicyList
		aps   v1.AdmissionPolicyList
		capgs v1.ClusterAdmissionPolicyGroupList
		apgs  v1.AdmissionPolicyGroupList
	)
	for _, l := range []client.ObjectList{&caps, &aps, &capgs, &apgs} {
		if err := c.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing policies: %w", err)
		}
	}
	add := func(p v1.Policy) {
		if boundServer(p) == ps && p.GetDeletionTimestamp().IsZero() {
			out = append(out, p)
		}
	}
	for i := range caps.Items {
		add(&caps.Items[i])
	}
	for i := range aps.Items {
		add(&aps.Items[i])
	}
	for i := range capgs.Items {
		add(&capgs.Items[i])
	}
	for i := range apgs.Items {
		add(&apgs.Items[i])
	}
	return out, nil
}

// desiredConfigMap returns the ConfigMap of ps for the given policies, and what it holds.
func (r *PolicyServerReconciler) desiredConfigMap(ps *v1.PolicyServer, policies []v1.Policy) (*corev1.ConfigMap, serverConfig, error) {
	sources, err := BuildSources(ps)
	if err != nil {
		return nil, serverConfig{}, err
	}
	yml, skipped := r.entries.buildConfig(policies, ps, r.Options)
	cfg := serverConfig{digest: ConfigDigest(yml), policies: len(policies) - len(skipped), skipped: skipped, policiesYML: yml}
	cm := &corev1.ConfigMap{ObjectMeta: r.objectMeta(ps)}
	cm.Annotations = map[string]string{v1.ConfigDigestAnnotation: cfg.digest}
	cm.Data = map[string]string{v1.PoliciesKey: string(yml), v1.SourcesKey: string(sources)}
	return cm, cfg, nil
}

// reconcileConfigMap writes policies.yml and sources.yml of every policy bound to ps, with the
// digest of policies.yml in the ConfigDigestAnnotation. The Deployment does not change with it:
// the servers reload the file when kubelet updates the mounted volume.
func (r *PolicyServerReconciler) reconcileConfigMap(ctx context.Context, ps *v1.PolicyServer) (serverConfig, error) {
	policies, err := boundPolicies(ctx, r.Client, ps.Name)
	if err != nil {
		return serverConfig{}, err
	}
	cm, cfg, err := r.desiredConfigMap(ps, policies)
	if err != nil {
		return serverConfig{}, err
	}
	var previous string
	have := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(cm), have); err == nil {
		previous = have.Annotations[v1.ConfigDigestAnnotation]
	} else if !apierrors.IsNotFound(err) {
		return serverConfig{}, fmt.Errorf("ConfigMap: %w", err)
	}
	if _, _, err := applyServerObject(ctx, r.Client, ps, cm); err != nil {
		return serverConfig{}, fmt.Errorf("ConfigMap: %w", err)
	}
	if previous != cfg.digest {
		r.Recorder.Eventf(ps, corev1.EventTypeNormal, EventReasonConfigChanged, "policies.yml: %d policies, %s", cfg.policies, cfg.digest)
		for _, id := range slices.Sorted(maps.Keys(cfg.skipped)) {
			r.Recorder.Eventf(ps, corev1.EventTypeWarning, EventReasonPolicyLeftOut, "%s left out of policies.yml: %v", id, cfg.skipped[id])
		}
	}
	return cfg, nil
}
