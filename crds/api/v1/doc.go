// Package v1 holds the Go types of tollgate's custom resources, group policies.tollgate.dev,
// version v1: PolicyServer, ClusterAdmissionPolicy, AdmissionPolicy, ClusterAdmissionPolicyGroup
// and AdmissionPolicyGroup.
//
// The kinds and JSON field names are Kubewarden's (policies.kubewarden.io/v1), so a Kubewarden
// manifest works here by changing only its apiVersion. The controller-gen markers carry the
// schema: defaults, enums, ranges and the CEL rules (x-kubernetes-validations) that replace the
// validating webhooks Kubewarden runs, so these CRDs need no webhook. `make crds` generates the
// manifests in crds/ from these types.
//
// names.go holds the names of the objects the controller makes for these resources (a policy
// server's Deployment, Service and Secret, a policy's id and webhook), by which the audit and other
// clients find them.
//
// This package must not know how the resources are reconciled (crds/controller) nor anything of
// the policy host: it is plain data, importable by clients.
//
// +kubebuilder:object:generate=true
// +groupName=policies.tollgate.dev
package v1
