// Package audit checks the objects already in a cluster against the policies that run there,
// as Kubewarden's audit scanner does, and writes the outcome as policy reports. Run is the one
// entry point: it reads the active policies with backgroundAudit (or the policies it is given),
// lists the objects their rules match page by page, builds a synthetic CREATE AdmissionReview per
// object, has an Evaluator judge it (by default the owning PolicyServer's /audit/<policy>
// endpoint over HTTPS, verified against the CA bundle the operator registers for the policy's
// webhook), and writes OpenReports Report/ClusterReport objects (or the legacy wgpolicyk8s.io
// PolicyReport/ClusterPolicyReport), one per audited object, updated in place.
//
// What it must not know: how a policy is evaluated (no Wasm, no host/policy: an Evaluator
// answers; cmd/tollgate plugs in a local module for authors), how the operator reconciles (it
// reads the policy resources, their status and the objects the operator names, through the
// names of crds/api/v1/names.go, and writes nothing but reports and the status.audit
// field of the policies it audited, by a merge patch of that field alone), and how reports and
// metrics are shown (cmd/tollgate prints its Results and serves Metrics).
package audit
