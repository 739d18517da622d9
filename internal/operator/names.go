package operator

import "fmt"

// Names of the objects the controller owns. Kubewarden's where they mean the same.
const (
	// ServicePortWebhook names the Service port of the HTTPS webhook (443).
	ServicePortWebhook = "policy-server"
	// ServicePortReadiness names the Service port of the probe endpoints, /metrics and /policies.
	ServicePortReadiness = "readiness"
	// ConfigMountPath, CertMountPath and CacheMountPath are where the Deployment mounts the
	// ConfigMap, the certificate Secret and the compilation cache.
	ConfigMountPath = "/config"
	CertMountPath   = "/pki"
	CacheMountPath  = "/cache"
	// RegistryAuthMountPath is where the imagePullSecret's .dockerconfigjson is mounted.
	RegistryAuthMountPath = "/registry-auth"
	// ContainerName is the policy server container's name.
	ContainerName = "policy-server"
	// CAKey, CAPrivateKey and OldCAKey are the keys of the CA Secret.
	CAKey        = "ca.crt"
	CAPrivateKey = "ca.key"
	OldCAKey     = "old-ca.crt"
	// LabelPartOf is set on every object the controller makes.
	LabelPartOf = "app.kubernetes.io/part-of"
	// LabelComponent tells policy-server objects from others.
	LabelComponent = "app.kubernetes.io/component"
	// LabelAppSelector selects a policy server's pods.
	LabelAppSelector = "app"
)

// PolicyServerObjectName is the name of every namespaced object of a PolicyServer:
// Deployment, Service, ConfigMap, Secret, ServiceAccount and PodDisruptionBudget.
func PolicyServerObjectName(ps string) string { return "policy-server-" + ps }

// PolicyServerAppLabel is the value of the "app" label that selects the server's pods.
func PolicyServerAppLabel(ps string) string { return "tollgate-policy-server-" + ps }

// ServiceHost is the DNS name the apiserver calls, the certificate's only SAN.
func ServiceHost(ps, namespace string) string {
	return fmt.Sprintf("%s.%s.svc", PolicyServerObjectName(ps), namespace)
}

// PolicyID is the policy's id in policies.yml, its webhook path (/validate/<id>) and the name
// of its webhook configuration: Kubewarden's "clusterwide-<name>" and "namespaced-<ns>-<name>";
// groups get "-group" so that a policy and a group of the same name do not collide.
func PolicyID(kind, namespace, name string) string {
	switch kind {
	case "ClusterAdmissionPolicy":
		return "clusterwide-" + name
	case "AdmissionPolicy":
		return "namespaced-" + namespace + "-" + name
	case "ClusterAdmissionPolicyGroup":
		return "clusterwide-group-" + name
	case "AdmissionPolicyGroup":
		return "namespaced-group-" + namespace + "-" + name
	}
	panic("controller: unknown policy kind " + kind)
}

// WebhookName is the name of the single webhook in a policy's configuration.
func WebhookName(id string) string { return id + ".policies.tollgate.dev" }

// PolicyKinds are the policy kinds, in the order they are reconciled and listed.
var PolicyKinds = []string{"ClusterAdmissionPolicy", "AdmissionPolicy", "ClusterAdmissionPolicyGroup", "AdmissionPolicyGroup"}
