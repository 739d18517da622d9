package v1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
// policy has Module, its digests and Settings; a group has Policies, by member name, and its
// Expression.
// +kubebuilder:object:generate=false
type RevisionData struct {
	RevisionModule `json:",inline"`
	// Policies of a group, by name.
	Policies map[string]RevisionModule `json:"policies,omitempty"`
	// Expression of a group. Revisions recorded before it was kept have none: an undo to one
	// of them leaves the expression as it is.
	Expression string `json:"expression,omitempty"`
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

// PolicyShadow is a candidate version of a policy (or of a group member): the policy server
// evaluates it beside the serving version on the same requests and counts where their answers
// differ, but only the serving version answers. What it omits is the serving version's;
// settings replace the serving settings as a whole. Promote it by editing the spec (the
// candidate becomes module and settings) and removing the shadow.
// +kubebuilder:validation:XValidation:rule="has(self.module) || has(self.settings)",message="a shadow needs module and/or settings (what it omits is the serving version's)"
type PolicyShadow struct {
	// Module is the candidate's module; the serving module when omitted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Module string `json:"module,omitempty"`

	// Settings are the candidate's settings; the serving settings when omitted.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Settings *runtime.RawExtension `json:"settings,omitempty"`
}

// GroupShadow is a candidate version of a policy group: its expression and/or members (each
// member's module and/or settings over the serving member's of the same name, or a new member
// with a module).
// +kubebuilder:validation:XValidation:rule="has(self.expression) || has(self.policies)",message="a group's shadow needs expression and/or policies (what it omits is the serving version's)"
type GroupShadow struct {
	// Expression is the candidate's expression; the serving one when omitted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Expression string `json:"expression,omitempty"`

	// Policies are the candidate's members that differ from the serving ones, by name.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Policies map[string]PolicyShadow `json:"policies,omitempty"`
}

// ShadowStatus is what the policy server's replicas report about spec.shadow, summed over them.
type ShadowStatus struct {
	// State is ready when every replica evaluates the candidate, failed when a replica could not
	// load it (Error says why; the serving version is unaffected), loading otherwise.
	State string `json:"state"`
	// Error is why the candidate failed to load.
	// +optional
	Error string `json:"error,omitempty"`
	// Evaluations of the candidate compared with the serving answer since it loaded.
	Evaluations int64 `json:"evaluations"`
	// Divergences are the evaluations whose answer differed, by kind: error, verdict, patch or
	// message (each counted once, under its first kind in that order).
	// +optional
	Divergences map[string]int64 `json:"divergences,omitempty"`
	// Dropped are the requests whose candidate evaluation was skipped, by reason (queue_full,
	// busy, cooling_down, shutdown): the candidate runs on spare capacity only.
	// +optional
	Dropped map[string]int64 `json:"dropped,omitempty"`
	// Recent are the last diverging requests, newest first (never the object).
	// +kubebuilder:validation:MaxItems=5
	// +listType=atomic
	// +optional
	Recent []ShadowDivergence `json:"recent,omitempty"`
}

// ShadowDivergence is one request the candidate answered differently.
type ShadowDivergence struct {
	Time metav1.Time `json:"time"`
	// UID of the admission request.
	// +optional
	UID string `json:"uid,omitempty"`
	// Kind, Namespace, Name and Operation of the request.
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Operation string `json:"operation,omitempty"`
	// Divergence is its kind: error, verdict, patch or message.
	Divergence string `json:"divergence"`
	// Serving and Shadow are the two answers in brief: "allowed", "denied: MESSAGE",
	// "error: REASON".
	Serving string `json:"serving"`
	Shadow  string `json:"shadow"`
}
