// Package crds embeds tollgate's CustomResourceDefinitions (group policies.tollgate.dev), the
// manifests that `make crds` generates with controller-gen from the Go types in crds/api/v1.
// The Helm chart carries the same files (charts/tollgate/crds), and tests install them into a
// real kube-apiserver.
//
// Subpackage api/v1 holds the types and the names of the objects made for them; the reconcilers
// behind `tollgate controller` live in crds/controller, the audit behind `tollgate audit` in
// crds/audit, and `tollgate rollout` (a policy's revisions) in crds/rollout. This package itself
// only serves the generated YAML: it must not know how it is reconciled or audited.
package crds
