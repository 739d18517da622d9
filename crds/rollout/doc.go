// Package rollout is `tollgate rollout history` and `tollgate rollout undo`: it reads a policy's
// revisions (the ControllerRevisions the controller keeps for it, crds/controller/revisions.go)
// and restores one of them into the policy's spec, as kubectl rollout does for Deployments,
// StatefulSets and DaemonSets.
//
// It must not know how revisions are made or served (the controller and the policy server do
// that): it reads ControllerRevisions by the labels and data of crds/api/v1/revision_types.go,
// and writes nothing but a merge patch of the policy's module and settings. cmd/tollgate prints.
package rollout
