// Package operator is `tollgate controller`: the reconcilers of tollgate's custom resources
// (crds/api/v1) on sigs.k8s.io/controller-runtime. Run is its one entry point; cmd/tollgate
// only turns flags into Options.
//
// Its reconcilers and what each one writes:
//
//	PolicyServer reconciler (policyserver_*.go)
//	  in the controller's namespace, per PolicyServer:
//	    ServiceAccount, Deployment running `tollgate serve`, Service,
//	    ConfigMap (policies.yml and sources.yml of every policy bound to the server),
//	    PodDisruptionBudget when asked,
//	    ClusterRole and ClusterRoleBinding when a policy is context aware
//	  status and Events of the PolicyServer
//	CertManager, the certificates (certs.go)
//	  the CA Secret the controller keeps for itself, and per PolicyServer a TLS Secret signed
//	  by that CA; the CA is renewed before it expires, certificates reissued as needed
//	policy reconcilers, one per kind (policy_*.go, serverstatus.go):
//	ClusterAdmissionPolicy, AdmissionPolicy, ClusterAdmissionPolicyGroup, AdmissionPolicyGroup
//	  one Validating or MutatingWebhookConfiguration per policy, registered only once every
//	  replica of its policy server reports through GET /policies that it serves the current
//	  configuration and loaded the policy
//	  status and Events of the policy
//
// Every object the reconcilers own is written by server-side apply with the field manager
// FieldOwner, and only when the fields that manager owns in the stored object differ from the
// desired ones (apply.go).
//
// Policy changes reach the servers by hot reload of the mounted ConfigMap: the Deployment's pod
// template never changes with them.
//
// This package must not know the Wasm host nor how policies are evaluated: it talks to policy
// servers only through their HTTP status endpoint (host/server/status) and writes their
// configuration in Kubewarden's policies.yml format (validated with host/config).
package controller
