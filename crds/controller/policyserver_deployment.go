package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// Volume names of the policy server pods.
const (
	volumeConfig       = "config"
	volumeCert         = "tls"
	volumeCache        = "cache"
	volumeRegistryAuth = "registry-auth"
	volumeVerification = "verification"
	volumeSigstore     = "sigstore-trust"
)

// The ConfigMaps of spec.verificationConfig and spec.sigstoreTrustConfig: their keys (as
// Kubewarden's) and where the pods mount them (no subPath: kubelet updates the files in place and
// the server, which watches them, verifies every module again without a rollout).
const (
	VerificationConfigKey  = "verification-config"
	SigstoreTrustConfigKey = "sigstore-trust-config"
	VerificationMountPath  = "/verification"
	SigstoreTrustMountPath = "/sigstore-trust"
)

// ServerArgs returns the arguments of the policy server container: `tollgate serve` with every
// path inside the volumes the Deployment mounts, so that the Deployment describes the server
// completely.
func ServerArgs(ps *v1.PolicyServer, o Options) []string {
	webhook, readiness := serverPorts(ps)
	args := []string{
		"serve",
		"--policies=" + ConfigMountPath + "/" + v1.PoliciesKey,
		"--policies-configmap=" + o.Namespace + "/" + v1.PolicyServerObjectName(ps.Name),
		"--sources-path=" + ConfigMountPath + "/" + v1.SourcesKey,
		"--cert-file=" + CertMountPath + "/" + TLSCertKey,
		"--key-file=" + CertMountPath + "/" + TLSKeyKey,
		"--port=" + strconv.Itoa(int(webhook)),
		"--readiness-probe-port=" + strconv.Itoa(int(readiness)),
		"--cache-dir=" + CacheMountPath,
		"--log-fmt=json",
	}
	if o.AlwaysAcceptAdmissionReviewsOnNamespace {
		args = append(args, "--always-accept-admission-reviews-on-namespace="+o.Namespace)
	}
	if ps.Spec.ImagePullSecret != "" {
		args = append(args, "--docker-config-json-path="+RegistryAuthMountPath+"/config.json")
	}
	if ps.Spec.VerificationConfig != "" {
		args = append(args, "--verification-path="+VerificationMountPath+"/"+VerificationConfigKey)
		if ps.Spec.SigstoreTrustConfig != "" {
			args = append(args, "--sigstore-trust-config="+SigstoreTrustMountPath+"/"+SigstoreTrustConfigKey)
		}
	}
	return args
}

// desiredDeployment returns ps's Deployment. Nothing in it depends on the policies: a policy
// change reaches the servers by hot reload of the mounted ConfigMap, never by a rollout.
func (r *PolicyServerReconciler) desiredDeployment(ps *v1.PolicyServer) *appsv1.Deployment {
	webhook, readiness := serverPorts(ps)
	selector := map[string]string{v1.LabelAppSelector: v1.PolicyServerAppLabel(ps.Name)}
	meta := r.objectMeta(ps)
	labels := meta.Labels
	maps.Copy(labels, selector)

	ro := true
	container := corev1.Container{
		Name:  ContainerName,
		Image: ps.Spec.Image,
		Args:  ServerArgs(ps, r.Options),
		Ports: []corev1.ContainerPort{
			{Name: v1.ServicePortWebhook, ContainerPort: webhook, Protocol: corev1.ProtocolTCP},
			{Name: v1.ServicePortReadiness, ContainerPort: readiness, Protocol: corev1.ProtocolTCP},
		},
		Env: ps.Spec.Env,
		VolumeMounts: []corev1.VolumeMount{
			// No subPath: kubelet updates the mounted ConfigMap and Secret in place, which the
			// server reloads.
			{Name: volumeConfig, MountPath: ConfigMountPath, ReadOnly: true},
			{Name: volumeCert, MountPath: CertMountPath, ReadOnly: true},
			{Name: volumeCache, MountPath: CacheMountPath},
		},
		// /livez answers from the start of the process, while the policies load (a cold
		// compilation takes seconds, more under a CPU limit); /readiness is 503 until they
		// have. So no startupProbe and no initial delay: RATIONALE.md "Why do the probes
		// answer before policies load?". Readiness every second, so that the pod is Ready
		// within a second of its load's end (every 5 s added up to 5 s to a 4-6 s cold start
		// under 500m), and 15 failures, so that a Ready pod still turns unready after 15 s of
		// failed probes as with 5 s x 3.
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readiness", Port: intstr.FromString(v1.ServicePortReadiness), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 1, FailureThreshold: 15},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/livez", Port: intstr.FromString(v1.ServicePortReadiness), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 10, FailureThreshold: 3},
		Resources:       corev1.ResourceRequirements{Limits: ps.Spec.Limits, Requests: ps.Spec.Requests},
		SecurityContext: ps.Spec.SecurityContexts.Container,
	}
	if container.SecurityContext == nil {
		no := false
		container.SecurityContext = &corev1.SecurityContext{
			RunAsNonRoot:             &ro,
			ReadOnlyRootFilesystem:   &ro,
			AllowPrivilegeEscalation: &no,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	volumes := []corev1.Volume{
		{Name: volumeConfig, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: v1.PolicyServerObjectName(ps.Name)}}}},
		{Name: volumeCert, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: v1.PolicyServerObjectName(ps.Name)}}},
		{Name: volumeCache, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if s := ps.Spec.ImagePullSecret; s != "" {
		volumes = append(volumes, corev1.Volume{Name: volumeRegistryAuth, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: s, Items: []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}}}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: volumeRegistryAuth, MountPath: RegistryAuthMountPath, ReadOnly: true})
	}
	for _, m := range verificationMounts(ps) {
		volumes = append(volumes, corev1.Volume{Name: m.volume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: m.configMap}, Items: []corev1.KeyToPath{{Key: m.key, Path: m.key}}}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: m.volume, MountPath: m.path, ReadOnly: true})
	}
	podSC := ps.Spec.SecurityContexts.Pod
	if podSC == nil {
		podSC = &corev1.PodSecurityContext{RunAsNonRoot: &ro, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	}
	sa := serverServiceAccount(ps)
	var affinity *corev1.Affinity
	if !equality.Semantic.DeepEqual(ps.Spec.Affinity, corev1.Affinity{}) {
		affinity = ps.Spec.Affinity.DeepCopy()
	}
	replicas := ps.Spec.Replicas
	maxUnavailable, maxSurge := intstr.FromInt32(0), intstr.FromString("25%")
	dep := &appsv1.Deployment{ObjectMeta: meta}
	dep.Spec = appsv1.DeploymentSpec{
		Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: selector},
		Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable, MaxSurge: &maxSurge}},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(ps.Spec.Annotations)},
			Spec: corev1.PodSpec{
				ServiceAccountName: sa,
				SecurityContext:    podSC,
				Containers:         []corev1.Container{container},
				Volumes:            volumes,
				Affinity:           affinity,
				Tolerations:        ps.Spec.Tolerations,
				PriorityClassName:  ps.Spec.PriorityClassName,
			},
		},
	}
	return dep
}

// reconcileDeployment keeps ps's ServiceAccount (when it uses its own) and Deployment, and
// returns the Deployment as stored (for its status). The Deployment is applied server-side:
// every field desiredDeployment sets is the controller's, repaired when someone changes it
// (env, securityContext, probes, resources...); fields others add are left alone.
func (r *PolicyServerReconciler) reconcileDeployment(ctx context.Context, ps *v1.PolicyServer) (*appsv1.Deployment, error) {
	if ps.Spec.ServiceAccountName == "" {
		if err := r.reconcileServiceAccount(ctx, ps); err != nil {
			return nil, err
		}
	}
	if err := checkEnvNames(ps.Spec.Env); err != nil {
		// Server-side apply would refuse the Deployment ("duplicate entries for key", in the
		// Deployment's terms); the one it has keeps running.
		return nil, err
	}
	dep, _, err := applyServerObject(ctx, r.Client, ps, r.desiredDeployment(ps))
	if err != nil {
		return nil, fmt.Errorf("Deployment: %w", err)
	}
	// The Deployment is written anyway: once the Secret (or ConfigMap) is fixed, kubelet starts
	// the pods.
	return dep, errors.Join(r.checkImagePullSecret(ctx, ps), r.checkVerificationConfigMaps(ctx, ps))
}

// checkEnvNames reports a variable spec.env defines twice. The CRD refuses it at admission
// (spec.env is a list keyed by name); a PolicyServer stored under an older CRD, which did not,
// may still have one.
func checkEnvNames(env []corev1.EnvVar) error {
	first := make(map[string]int, len(env))
	for i, e := range env {
		if j, ok := first[e.Name]; ok {
			return fmt.Errorf("spec.env: %q is defined twice (entries %d and %d): a name may appear once; the Deployment was not written (its pods keep their environment)", e.Name, j, i)
		}
		first[e.Name] = i
	}
	return nil
}

// verificationMount is a ConfigMap of spec.verificationConfig or spec.sigstoreTrustConfig.
type verificationMount struct {
	field, configMap, key, volume, path string
}

// verificationMounts lists the verification ConfigMaps ps names (the trust config only with a
// verification config: alone it would verify nothing).
func verificationMounts(ps *v1.PolicyServer) []verificationMount {
	if ps.Spec.VerificationConfig == "" {
		return nil
	}
	ms := []verificationMount{{"spec.verificationConfig", ps.Spec.VerificationConfig, VerificationConfigKey, volumeVerification, VerificationMountPath}}
	if ps.Spec.SigstoreTrustConfig != "" {
		ms = append(ms, verificationMount{"spec.sigstoreTrustConfig", ps.Spec.SigstoreTrustConfig, SigstoreTrustConfigKey, volumeSigstore, SigstoreTrustMountPath})
	}
	return ms
}

// checkVerificationConfigMaps reports a verification ConfigMap that the pods cannot mount:
// missing, or without its key.
func (r *PolicyServerReconciler) checkVerificationConfigMaps(ctx context.Context, ps *v1.PolicyServer) error {
	var errs []error
	for _, m := range verificationMounts(ps) {
		cm := &corev1.ConfigMap{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Options.Namespace, Name: m.configMap}, cm); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", m.field, m.configMap, err))
			continue
		}
		if _, ok := cm.Data[m.key]; !ok {
			errs = append(errs, fmt.Errorf("%s %q: the ConfigMap in namespace %s has no %s key", m.field, m.configMap, r.Options.Namespace, m.key))
		}
	}
	return errors.Join(errs...)
}

// checkImagePullSecret reports an imagePullSecret that the pods cannot mount: missing, or
// without the .dockerconfigjson key.
func (r *PolicyServerReconciler) checkImagePullSecret(ctx context.Context, ps *v1.PolicyServer) error {
	name := ps.Spec.ImagePullSecret
	if name == "" {
		return nil
	}
	sec := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Options.Namespace, Name: name}, sec); err != nil {
		return fmt.Errorf("spec.imagePullSecret %q: %w", name, err)
	}
	if _, ok := sec.Data[corev1.DockerConfigJsonKey]; !ok {
		return fmt.Errorf("spec.imagePullSecret %q: the Secret (type %s) has no %s key: it must be a %s Secret in namespace %s",
			name, sec.Type, corev1.DockerConfigJsonKey, corev1.SecretTypeDockerConfigJson, r.Options.Namespace)
	}
	return nil
}
