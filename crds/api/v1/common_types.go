package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// PolicyMode is how a policy's verdicts are applied.
// +kubebuilder:validation:Enum=protect;monitor
type PolicyMode string

const (
	// ModeProtect enforces the policy: rejections reject, mutations mutate.
	ModeProtect PolicyMode = "protect"
	// ModeMonitor only logs what the policy would have done; every request is allowed.
	ModeMonitor PolicyMode = "monitor"
)

// PolicyModeStatus is the mode the policy server actually serves a policy in.
// +kubebuilder:validation:Enum=protect;monitor;unknown
type PolicyModeStatus string

// ModeUnknown: the policy server does not serve the policy (yet).
const ModeUnknown PolicyModeStatus = "unknown"

// PolicyStatusEnum is the life-cycle stage of a policy.
// +kubebuilder:validation:Enum=unscheduled;scheduled;pending;active
type PolicyStatusEnum string

const (
	// PolicyStatusUnscheduled: no PolicyServer of that name exists.
	PolicyStatusUnscheduled PolicyStatusEnum = "unscheduled"
	// PolicyStatusScheduled: the PolicyServer exists; the policy is not in its configuration yet.
	PolicyStatusScheduled PolicyStatusEnum = "scheduled"
	// PolicyStatusPending: the policy is in the configuration; the policy server has not
	// loaded it on every replica (or failed to: see the PolicyActive condition).
	PolicyStatusPending PolicyStatusEnum = "pending"
	// PolicyStatusActive: every replica serves the policy and its webhook is registered.
	PolicyStatusActive PolicyStatusEnum = "active"
)

// Condition types and reasons of policies.
const (
	// ConditionPolicyActive is True when the webhook is registered and every replica serves
	// the policy's current spec.
	ConditionPolicyActive = "PolicyActive"
	// ConditionConfigurationUpToDate is True when every replica serves the current configuration.
	ConditionConfigurationUpToDate = "PolicyServerConfigurationUpToDate"
	// ConditionPolicyUniquelyReachable is True when no replica serves an older configuration.
	ConditionPolicyUniquelyReachable = "PolicyUniquelyReachable"
	// ConditionReadsSecrets is True (a warning) on a cluster-wide policy whose
	// contextAwareResources include Secrets: its PolicyServer may then read every Secret of
	// the cluster. Absent otherwise.
	ConditionReadsSecrets = "ReadsSecrets"
)

// FailurePolicyType is what the apiserver does when the webhook cannot be called.
// +kubebuilder:validation:Enum=Ignore;Fail
type FailurePolicyType string

// MatchPolicyType decides whether equivalent resources (another group or version) match.
// +kubebuilder:validation:Enum=Exact;Equivalent
type MatchPolicyType string

// SideEffectClass declares whether the webhook has side effects.
// +kubebuilder:validation:Enum=None;NoneOnDryRun
type SideEffectClass string

// OperationType is an admission operation.
// +kubebuilder:validation:Enum=CREATE;UPDATE;DELETE;CONNECT;*
type OperationType string

// ScopeType restricts a rule to cluster-scoped or namespaced resources.
// +kubebuilder:validation:Enum=Cluster;Namespaced;*
type ScopeType string

// RuleWithOperations is a webhook rule, with the JSON of admissionregistration/v1's
// RuleWithOperations. Lists and strings are bounded so the CEL rules that inspect them stay
// within the apiserver's cost budget.
type RuleWithOperations struct {
	// Operations the rule matches; "*" is all.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Operations []OperationType `json:"operations"`
	// APIGroups the rule matches; "" is the core group, "*" is all.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	APIGroups []string `json:"apiGroups,omitempty"`
	// APIVersions the rule matches; "*" is all.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	APIVersions []string `json:"apiVersions"`
	// Resources the rule matches, e.g. "pods", "pods/status", "*", "*/*".
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	Resources []string `json:"resources"`
	// Scope restricts the rule to cluster-scoped ("Cluster") or namespaced ("Namespaced")
	// resources; "*" (the default) is both. AdmissionPolicy rules are always "Namespaced".
	// +optional
	Scope *ScopeType `json:"scope,omitempty"`
}

// MatchCondition is a CEL expression the request must satisfy for the webhook to be called
// (admissionregistration/v1 MatchCondition).
type MatchCondition struct {
	// Name identifies the condition; a qualified name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
	Name string `json:"name"`
	// Expression is the CEL expression; it must evaluate to a bool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=10240
	// +kubebuilder:validation:Pattern=`\S`
	Expression string `json:"expression"`
}

// ContextAwareResource is a kind a context-aware policy may read from the cluster.
type ContextAwareResource struct {
	// APIVersion of the resource, e.g. "v1" or "apps/v1".
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind of the resource, e.g. "Namespace".
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
}

// WebhookSpec holds the fields that every policy kind turns into its webhook configuration.
type WebhookSpec struct {
	// PolicyServer is the name of the PolicyServer that serves this policy. Immutable.
	// +kubebuilder:default=default
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="policyServer is immutable: delete the policy and create it again to move it"
	// +optional
	PolicyServer string `json:"policyServer,omitempty"`

	// Mode is protect (enforce) or monitor (log only). A policy may go from monitor to protect,
	// not back.
	// +kubebuilder:default=protect
	// +kubebuilder:validation:XValidation:rule="!(oldSelf == 'protect' && self == 'monitor')",message="mode may go from monitor to protect, not from protect to monitor"
	// +optional
	Mode PolicyMode `json:"mode,omitempty"`

	// Rules select the requests sent to the policy.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Rules []RuleWithOperations `json:"rules"`

	// FailurePolicy is what the apiserver does when the policy server cannot be reached:
	// Fail (the default) rejects the request, Ignore lets it through.
	// +optional
	FailurePolicy *FailurePolicyType `json:"failurePolicy,omitempty"`

	// MatchPolicy: Equivalent (the default) also sends requests for the same resource through
	// another group or version; Exact does not.
	// +optional
	MatchPolicy *MatchPolicyType `json:"matchPolicy,omitempty"`

	// MatchConditions are CEL expressions the request must all satisfy (at most 64).
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	MatchConditions []MatchCondition `json:"matchConditions,omitempty"`

	// ObjectSelector selects the objects by their labels.
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// SideEffects of the policy: None (the default) or NoneOnDryRun.
	// +optional
	SideEffects *SideEffectClass `json:"sideEffects,omitempty"`

	// TimeoutSeconds is the apiserver's deadline for the webhook call.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// BackgroundAudit says whether the policy may be used by audits of existing objects.
	// +kubebuilder:default=true
	// +optional
	BackgroundAudit *bool `json:"backgroundAudit,omitempty"`
}

// ModuleSpec is a Wasm module with its settings.
type ModuleSpec struct {
	// Module is the policy's Wasm module: registry://, https://, http://, file:// or builtin://.
	// A URI without a scheme is a registry reference.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Module string `json:"module"`

	// Settings are passed to the policy as they are.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +nullable
	// +optional
	Settings runtime.RawExtension `json:"settings,omitempty"`

	// TimeoutEvalSeconds bounds one evaluation of the policy on the policy server (the
	// server's --policy-timeout otherwise). At most timeoutSeconds.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutEvalSeconds *int32 `json:"timeoutEvalSeconds,omitempty"`
}

// PolicyStatus is the observed state of every policy kind.
type PolicyStatus struct {
	// PolicyStatus is the life-cycle stage: unscheduled, scheduled, pending or active.
	// +optional
	PolicyStatus PolicyStatusEnum `json:"policyStatus,omitempty"`
	// Mode is the mode the policy server serves the policy in.
	// +optional
	Mode PolicyModeStatus `json:"mode,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: PolicyActive, PolicyServerConfigurationUpToDate, PolicyUniquelyReachable.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Revision is the revision the policy server serves (a ControllerRevision of the policy's
	// module digest and settings) and since when; set once the policy is active.
	// +optional
	Revision *RevisionStatus `json:"revision,omitempty"`
	// Shadow is what the policy server reports about spec.shadow: evaluations, divergences by
	// kind, the last diverging requests; absent without a shadow.
	// +optional
	Shadow *ShadowStatus `json:"shadow,omitempty"`
	// Audit is the last full audit pass's summary for this policy, written by `tollgate audit`
	// (a merge patch of this field only; the controller keeps it).
	// +optional
	Audit *PolicyAuditStatus `json:"audit,omitempty"`
}

// PolicyAuditStatus is one audit pass's outcome for a policy.
type PolicyAuditStatus struct {
	// LastAuditTime is when the pass that wrote this ended.
	LastAuditTime metav1.Time `json:"lastAuditTime"`
	// Violations is the number of objects the policy rejected (fail results).
	Violations int32 `json:"violations"`
	// Errors is the number of objects the policy could not evaluate (error results).
	Errors int32 `json:"errors"`
	// Passed is the number of objects the policy accepted (pass results).
	Passed int32 `json:"passed"`
}
