package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// HostCapability is a pattern of host calls a namespaced policy may make: "*", a namespace
// ("oci/*"), a version ("oci/v1/*") or one operation ("kubernetes/get_resource").
// +kubebuilder:validation:Enum="*";"oci/*";"oci/v1/*";"oci/v2/*";"oci/v1/verify";"oci/v2/verify";"oci/v1/manifest_digest";"oci/v1/oci_manifest";"oci/v1/oci_manifest_config";"net/*";"net/v1/*";"net/v1/dns_lookup_host";"crypto/*";"crypto/v1/*";"crypto/v1/is_certificate_trusted";"kubernetes/*";"kubernetes/list_resources_by_namespace";"kubernetes/list_resources_all";"kubernetes/get_resource";"kubernetes/can_i"
type HostCapability string

// ModuleScheme is a module URI scheme a namespaced policy may use. file is not one of them.
// +kubebuilder:validation:Enum=registry;https;http;builtin
type ModuleScheme string

// Module schemes.
const (
	ModuleSchemeRegistry ModuleScheme = "registry"
	ModuleSchemeHTTPS    ModuleScheme = "https"
	ModuleSchemeHTTP     ModuleScheme = "http"
	ModuleSchemeBuiltin  ModuleScheme = "builtin"
)

// DefaultNamespacedPoliciesModuleSchemes are the schemes namespaced policies may use when a
// PolicyServer's namespacedPoliciesModuleSchemes is unset.
var DefaultNamespacedPoliciesModuleSchemes = []ModuleScheme{ModuleSchemeRegistry, ModuleSchemeHTTPS, ModuleSchemeBuiltin}

// PolicyServerSecurity sets the security contexts of the policy server's pods.
type PolicyServerSecurity struct {
	// Container is the container's security context.
	// +optional
	Container *corev1.SecurityContext `json:"container,omitempty"`
	// Pod is the pod's security context.
	// +optional
	Pod *corev1.PodSecurityContext `json:"pod,omitempty"`
}

// PolicyServerSpec is the desired state of a PolicyServer.
// +kubebuilder:validation:XValidation:rule="!(has(self.minAvailable) && has(self.maxUnavailable))",message="minAvailable and maxUnavailable are mutually exclusive: set at most one"
// +kubebuilder:validation:XValidation:rule="(has(self.webhookPort) ? self.webhookPort : 8443) != (has(self.readinessProbePort) ? self.readinessProbePort : 8081)",message="webhookPort and readinessProbePort must differ",fieldPath=".readinessProbePort"
// +kubebuilder:validation:XValidation:rule="!has(self.limits) || self.limits.all(k, !string(self.limits[k]).startsWith('-'))",message="limits must not be negative",fieldPath=".limits"
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || self.requests.all(k, !string(self.requests[k]).startsWith('-'))",message="requests must not be negative",fieldPath=".requests"
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory', 'ephemeral-storage'].all(r, !(r in self.requests) || !(r in self.limits) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",message="requests must not exceed limits (cpu, memory, ephemeral-storage)",fieldPath=".requests"
type PolicyServerSpec struct {
	// Image is the tollgate container image the policy server runs.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`

	// Replicas is the number of policy server pods.
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`

	// MinAvailable for the PodDisruptionBudget (one is created when this or maxUnavailable is set).
	// +optional
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`

	// MaxUnavailable for the PodDisruptionBudget.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Annotations are added to the pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// Labels are added to every object of the server (Deployment, pods, Service, ...).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Env is added to the policy server container's environment (TOLLGATE_<FLAG> variables set
	// server flags; see docs/server.md). A name appears once: the Deployment is written by
	// server-side apply, where a container's env is keyed by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// ServiceAccountName runs the pods under this service account (the namespace's default
	// otherwise).
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// ImagePullSecret names a kubernetes.io/dockerconfigjson Secret in the controller's
	// namespace with credentials for the registries policies are pulled from.
	// +optional
	ImagePullSecret string `json:"imagePullSecret,omitempty"`

	// InsecureSources are registries reached over plain HTTP or without verifying TLS.
	// +optional
	InsecureSources []string `json:"insecureSources,omitempty"`

	// SourceAuthorities are extra CA certificates (PEM) per registry host.
	// +optional
	SourceAuthorities map[string][]string `json:"sourceAuthorities,omitempty"`

	// VerificationConfig names a ConfigMap with a signature verification configuration.
	// Accepted for compatibility; tollgate does not verify signatures yet.
	// +optional
	VerificationConfig string `json:"verificationConfig,omitempty"`

	// SigstoreTrustConfig names a ConfigMap with a sigstore trust configuration.
	// Accepted for compatibility; tollgate does not verify signatures yet.
	// +optional
	SigstoreTrustConfig string `json:"sigstoreTrustConfig,omitempty"`

	// SecurityContexts of the pods and the container.
	// +optional
	SecurityContexts PolicyServerSecurity `json:"securityContexts,omitempty"`

	// Affinity of the pods.
	// +optional
	Affinity corev1.Affinity `json:"affinity,omitempty"`

	// Limits of the policy server container.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`

	// Requests of the policy server container.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`

	// Tolerations of the pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName of the pods.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// NamespacedPoliciesCapabilities are the host capabilities AdmissionPolicies and
	// AdmissionPolicyGroups on this server may use (cluster-wide policies may use all). None
	// when unset: a tenant's policy gets a host capability (the server's Kubernetes client,
	// its registry credentials, DNS) only when this lists it.
	// +kubebuilder:validation:MaxItems=20
	// +listType=set
	// +optional
	NamespacedPoliciesCapabilities []HostCapability `json:"namespacedPoliciesCapabilities,omitempty"`

	// NamespacedPoliciesModuleSchemes are the module URI schemes AdmissionPolicies and
	// AdmissionPolicyGroups on this server may use (registry, https, http, builtin; a module
	// without a scheme is registry). Unset: registry, https and builtin. file is never allowed
	// to them: the module would be read from the policy server's file system.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	// +optional
	NamespacedPoliciesModuleSchemes []ModuleScheme `json:"namespacedPoliciesModuleSchemes,omitempty"`

	// WebhookPort is the container port of the HTTPS webhook.
	// +kubebuilder:default=8443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	WebhookPort *int32 `json:"webhookPort,omitempty"`

	// ReadinessProbePort is the container port of the probes, /metrics and /policies.
	// +kubebuilder:default=8081
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	ReadinessProbePort *int32 `json:"readinessProbePort,omitempty"`

	// MetricsPort is accepted for compatibility: tollgate serves /metrics on the readiness
	// probe port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	MetricsPort *int32 `json:"metricsPort,omitempty"`
}

// PolicyServerStatus is the observed state of a PolicyServer.
type PolicyServerStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: CertSecretReconciled, ConfigMapReconciled, DeploymentReconciled,
	// ServiceReconciled, RBACReconciled, PodDisruptionBudgetReconciled, PolicyWebhooksCleanedUp,
	// Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Policies is the number of policies and groups bound to this server.
	// +optional
	Policies int32 `json:"policies,omitempty"`
	// ConfigDigest is the sha256 of the policies.yml the controller wrote last.
	// +optional
	ConfigDigest string `json:"configDigest,omitempty"`
	// ReadyReplicas is the number of replicas that serve ConfigDigest.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
}

// Condition types and reasons of a PolicyServer.
const (
	ConditionCertSecretReconciled    = "CertSecretReconciled"
	ConditionConfigMapReconciled     = "ConfigMapReconciled"
	ConditionDeploymentReconciled    = "DeploymentReconciled"
	ConditionServiceReconciled       = "ServiceReconciled"
	ConditionRBACReconciled          = "RBACReconciled"
	ConditionPDBReconciled           = "PodDisruptionBudgetReconciled"
	ConditionPolicyWebhooksCleanedUp = "PolicyWebhooksCleanedUp"
	ReasonReconciliationSucceeded    = "ReconciliationSucceeded"
	ReasonReconciliationFailed       = "ReconciliationFailed"
	PolicyServerDefaultWebhookPort   = 8443
	PolicyServerDefaultReadinessPort = 8081
	PolicyServerFinalizer            = "policies.tollgate.dev/finalizer"
	PolicyFinalizer                  = PolicyServerFinalizer
	PolicyServerLabel                = "tollgate.dev/policy-server"
	ConfigDigestAnnotation           = "tollgate.dev/config-digest"
	PolicyNameAnnotation             = "tollgate.dev/policy-name"
	PolicyNamespaceAnnotation        = "tollgate.dev/policy-namespace"
	PartOfLabelValue                 = "tollgate"
)

// PoliciesKey and SourcesKey are the keys of a PolicyServer's ConfigMap: the policies.yml and
// sources.yml that `tollgate serve` reads, mounted as files or watched through the API
// (--policies-configmap).
const (
	PoliciesKey = "policies.yml"
	SourcesKey  = "sources.yml"
)

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ps
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Policies",type=integer,JSONPath=`.status.policies`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a PolicyServer name may have at most 63 characters (it names a Service)"

// PolicyServer is a deployment of `tollgate serve` that serves the policies bound to it.
type PolicyServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PolicyServerSpec   `json:"spec,omitempty"`
	Status PolicyServerStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// PolicyServerList is a list of PolicyServer.
type PolicyServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyServer `json:"items"`
}
