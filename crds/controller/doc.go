// Package controller is `tollgate controller`: the reconcilers of tollgate's custom resources
// (crds/api/v1) on sigs.k8s.io/controller-runtime. Run is its one entry point.
//
// Per PolicyServer it keeps, in the controller's namespace: a ServiceAccount, a Deployment
// running `tollgate serve`, a Service, a ConfigMap (policies.yml and sources.yml of every policy
// bound to the server), a TLS Secret signed by the CA that the controller keeps in its own
// Secret, and a PodDisruptionBudget when asked (policyserver_*.go, certs.go). Per policy it keeps
// one Validating or MutatingWebhookConfiguration, registered only once every replica of the
// policy server reports through GET /policies that it serves the current configuration and
// loaded the policy (policy_*.go, serverstatus.go). Policy changes reach the servers by hot
// reload of the mounted ConfigMap: the Deployment's pod template never changes with them.
//
// This package must not know how policies are evaluated: it talks to policy servers only
// through their HTTP status endpoint (host/server/status) and writes their configuration in
// Kubewarden's policies.yml format (validated with host/config).
package controller
