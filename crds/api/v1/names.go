package v1

import "fmt"

// Names of the objects the controller makes for these resources, Kubewarden's where they mean the
// same. They are part of the API: the audit, the chart and users' tooling find a policy server's
// objects and a policy's webhook by them.
const (
	// ServicePortWebhook names the Service port of the HTTPS webhook (443).
	ServicePortWebhook = "policy-server"
	// ServicePortReadiness names the Service port of the probe endpoints, /metrics and /policies.
	ServicePortReadiness = "readiness"
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
