package v1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultRevisionHistoryLimit is spec.revisionHistoryLimit's default: the revisions kept besides
// the serving one.
const DefaultRevisionHistoryLimit = 10

// RevisionSpec is what every policy kind says about its revisions.
type RevisionSpec struct {
	// RevisionHistoryLimit is how many old revisions (ControllerRevisions) are kept besides the
	// serving one, for `tollgate rollout history` and `tollgate rollout undo`.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
}

// HistoryLimit is spec.revisionHistoryLimit, its default when unset.
func (s RevisionSpec) HistoryLimit() int {
	if s.RevisionHistoryLimit == nil || *s.RevisionHistoryLimit < 0 {
		return DefaultRevisionHistoryLimit
	}
	return int(*s.RevisionHistoryLimit)
}

// RevisionStatus names the revision the policy server serves.
type RevisionStatus struct {
	// Name of the ControllerRevision.
	Name string `json:"name"`
	// Number is the revision number (the ControllerRevision's revision), as
	// `tollgate rollout history` lists it.
	Number int64 `json:"number"`
	// ModuleDigest is the sha256 of the Wasm module the server loaded (single policies).
	// +optional
	ModuleDigest string `json:"moduleDigest,omitempty"`
	// ActiveSince is when this revision became active.
	ActiveSince metav1.Time `json:"activeSince"`
}

// Labels and annotations of a policy's ControllerRevisions. A cluster-wide policy's revisions
// live in the controller's namespace, a namespaced policy's in its own; the controller finds
// them by RevisionPolicyUIDLabel.
const (
	// RevisionPolicyUIDLabel is the UID of the policy a ControllerRevision belongs to.
	RevisionPolicyUIDLabel = "policies.tollgate.dev/policy-uid"
	// RevisionPolicyKindLabel is its kind.
	RevisionPolicyKindLabel = "policies.tollgate.dev/policy-kind"
	// RevisionHashLabel is the hash of the revision's data (as StatefulSets' controller-revision-hash).
	RevisionHashLabel = "controller-revision-hash"
	// ChangeCauseAnnotation is kubectl's change cause: copied from the policy onto the revision
	// it made, shown by `tollgate rollout history`.
	ChangeCauseAnnotation = "kubernetes.io/change-cause"
)

// RevisionData is the data of a policy's ControllerRevision: what a revision restores. A single
// policy has Module, its digests and Settings; a group has Policies, by member name.
// +kubebuilder:object:generate=false
type RevisionData struct {
	RevisionModule `json:",inline"`
	// Policies of a group, by name.
	Policies map[string]RevisionModule `json:"policies,omitempty"`
}

// RevisionModule is one module with its settings, as the policy server loaded it.
// +kubebuilder:object:generate=false
type RevisionModule struct {
	// Module is the module URI as the spec gave it.
	Module string `json:"module,omitempty"`
	// ModuleDigest is the sha256 of the Wasm bytes the policy server loaded.
	ModuleDigest string `json:"moduleDigest,omitempty"`
	// ManifestDigest is the registry manifest digest of a registry:// module, when the server
	// reported it: `tollgate rollout undo` pins the module to it, so that the server loads it
	// from its store without asking the registry.
	ManifestDigest string `json:"manifestDigest,omitempty"`
	// Settings as the spec gave them.
	Settings json.RawMessage `json:"settings,omitempty"`
}
