package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Policy is what the four policy kinds have in common, so that one reconciler serves them all.
// +kubebuilder:object:generate=false
type Policy interface {
	metav1.Object
	runtime.Object
	// PolicyKind is the kind's name ("ClusterAdmissionPolicy", ...), also on objects whose
	// TypeMeta is empty (as the client returns them).
	PolicyKind() string
	// Webhook returns the fields that become the webhook configuration.
	Webhook() *WebhookSpec
	// PolicyStatus returns the status, to read or to change in place.
	PolicyStatus() *PolicyStatus
	// IsMutating says whether the policy gets a MutatingWebhookConfiguration (groups never do).
	IsMutating() bool
	// IsGroup says whether the policy is a policy group.
	IsGroup() bool
	// IsNamespaced says whether the policy applies to its own namespace only.
	IsNamespaced() bool
	// Selector returns the namespace selector of a cluster-wide policy (nil if none), and
	// whether the policy may see the controller's own namespace.
	Selector() (sel *metav1.LabelSelector, allowInsideControllerNamespace bool)
	// IncludedSkippedNamespaces returns the skipped namespaces a cluster-wide policy sees
	// anyway (spec.includeSkippedNamespaces; nil for namespaced policies).
	IncludedSkippedNamespaces() []string
	// Revisions returns what the spec says about the policy's revisions.
	Revisions() RevisionSpec
}

var (
	_ Policy = &ClusterAdmissionPolicy{}
	_ Policy = &AdmissionPolicy{}
	_ Policy = &ClusterAdmissionPolicyGroup{}
	_ Policy = &AdmissionPolicyGroup{}
)

func (p *ClusterAdmissionPolicy) PolicyKind() string          { return "ClusterAdmissionPolicy" }
func (p *ClusterAdmissionPolicy) Webhook() *WebhookSpec       { return &p.Spec.WebhookSpec }
func (p *ClusterAdmissionPolicy) PolicyStatus() *PolicyStatus { return &p.Status }
func (p *ClusterAdmissionPolicy) IsMutating() bool            { return p.Spec.Mutating }
func (p *ClusterAdmissionPolicy) IsGroup() bool               { return false }
func (p *ClusterAdmissionPolicy) IsNamespaced() bool          { return false }
func (p *ClusterAdmissionPolicy) Selector() (*metav1.LabelSelector, bool) {
	return p.Spec.NamespaceSelector, p.Spec.AllowInsideAdmissionControllerNamespace
}

func (p *ClusterAdmissionPolicy) IncludedSkippedNamespaces() []string {
	return p.Spec.IncludeSkippedNamespaces
}

func (p *AdmissionPolicy) PolicyKind() string                      { return "AdmissionPolicy" }
func (p *AdmissionPolicy) Webhook() *WebhookSpec                   { return &p.Spec.WebhookSpec }
func (p *AdmissionPolicy) PolicyStatus() *PolicyStatus             { return &p.Status }
func (p *AdmissionPolicy) IsMutating() bool                        { return p.Spec.Mutating }
func (p *AdmissionPolicy) IsGroup() bool                           { return false }
func (p *AdmissionPolicy) IsNamespaced() bool                      { return true }
func (p *AdmissionPolicy) Selector() (*metav1.LabelSelector, bool) { return nil, false }
func (p *AdmissionPolicy) IncludedSkippedNamespaces() []string     { return nil }

func (p *ClusterAdmissionPolicyGroup) PolicyKind() string          { return "ClusterAdmissionPolicyGroup" }
func (p *ClusterAdmissionPolicyGroup) Webhook() *WebhookSpec       { return &p.Spec.WebhookSpec }
func (p *ClusterAdmissionPolicyGroup) PolicyStatus() *PolicyStatus { return &p.Status }
func (p *ClusterAdmissionPolicyGroup) IsMutating() bool            { return false }
func (p *ClusterAdmissionPolicyGroup) IsGroup() bool               { return true }
func (p *ClusterAdmissionPolicyGroup) IsNamespaced() bool          { return false }
func (p *ClusterAdmissionPolicyGroup) Selector() (*metav1.LabelSelector, bool) {
	return p.Spec.NamespaceSelector, p.Spec.AllowInsideAdmissionControllerNamespace
}

func (p *ClusterAdmissionPolicyGroup) IncludedSkippedNamespaces() []string {
	return p.Spec.IncludeSkippedNamespaces
}

func (p *AdmissionPolicyGroup) PolicyKind() string                      { return "AdmissionPolicyGroup" }
func (p *AdmissionPolicyGroup) Webhook() *WebhookSpec                   { return &p.Spec.WebhookSpec }
func (p *AdmissionPolicyGroup) PolicyStatus() *PolicyStatus             { return &p.Status }
func (p *AdmissionPolicyGroup) IsMutating() bool                        { return false }
func (p *AdmissionPolicyGroup) IsGroup() bool                           { return true }
func (p *AdmissionPolicyGroup) IsNamespaced() bool                      { return true }
func (p *AdmissionPolicyGroup) Selector() (*metav1.LabelSelector, bool) { return nil, false }
func (p *AdmissionPolicyGroup) IncludedSkippedNamespaces() []string     { return nil }

func (p *ClusterAdmissionPolicy) Revisions() RevisionSpec { return p.Spec.RevisionSpec }

func (p *AdmissionPolicy) Revisions() RevisionSpec { return p.Spec.RevisionSpec }

func (p *ClusterAdmissionPolicyGroup) Revisions() RevisionSpec { return p.Spec.RevisionSpec }

func (p *AdmissionPolicyGroup) Revisions() RevisionSpec { return p.Spec.RevisionSpec }
