package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterAdmissionPolicySpec is the desired state of a ClusterAdmissionPolicy.
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutEvalSeconds) || self.timeoutEvalSeconds <= self.timeoutSeconds",message="timeoutEvalSeconds must not exceed timeoutSeconds (default 10)",fieldPath=".timeoutEvalSeconds"
type ClusterAdmissionPolicySpec struct {
	WebhookSpec  `json:",inline"`
	ModuleSpec   `json:",inline"`
	RevisionSpec `json:",inline"`

	// Shadow is a candidate version evaluated beside the serving one on the same requests,
	// never answering them: status.shadow and the server's metrics report where the two
	// answers differ (docs/operator.md, "Changing a policy safely").
	// +optional
	Shadow *PolicyShadow `json:"shadow,omitempty"`

	// Mutating says whether the policy may mutate requests (a MutatingWebhookConfiguration);
	// a mutation from a policy that is not mutating rejects the request.
	Mutating bool `json:"mutating"`

	// NamespaceSelector selects the namespaces of the requests sent to the policy. The
	// controller's own namespace is always left out unless
	// allowInsideAdmissionControllerNamespace is true.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// AllowInsideAdmissionControllerNamespace lets the policy see requests in the namespace
	// tollgate runs in.
	// +optional
	AllowInsideAdmissionControllerNamespace bool `json:"allowInsideAdmissionControllerNamespace,omitempty"`

	// IncludeSkippedNamespaces names namespaces that the controller leaves out of every
	// cluster-wide policy (its --skip-namespaces: kube-system and kube-node-lease unless the
	// chart's skipNamespaces says otherwise) and that this policy sees anyway. A name that is
	// not skipped changes nothing.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	IncludeSkippedNamespaces []string `json:"includeSkippedNamespaces,omitempty"`

	// ContextAwareResources are the kinds the policy may read from the cluster.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ContextAwareResources []ContextAwareResource `json:"contextAwareResources,omitempty"`

	// Message replaces the policy's rejection message; the policy's own message goes to
	// status.details.causes.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`
}

// AdmissionPolicySpec is the desired state of an AdmissionPolicy: a policy for the requests of
// its own namespace.
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutEvalSeconds) || self.timeoutEvalSeconds <= self.timeoutSeconds",message="timeoutEvalSeconds must not exceed timeoutSeconds (default 10)",fieldPath=".timeoutEvalSeconds"
// +kubebuilder:validation:XValidation:rule=`self.rules.all(r, !(has(r.apiGroups) && r.apiGroups.exists(g, g == '*') && r.resources.exists(x, x == '*' || x == '*/*')))`,message="an AdmissionPolicy may not match every resource of every group (apiGroups '*' with resources '*' or '*/*')",fieldPath=".rules"
// +kubebuilder:validation:XValidation:rule=`self.rules.all(r, !(has(r.apiGroups) && r.apiGroups.exists(g, g == 'wgpolicyk8s.io' || g == '*') && r.resources.exists(x, x == 'policyreports' || x == '*' || x == '*/*' || x.startsWith('policyreports/'))))`,message="an AdmissionPolicy may not match policyreports (group wgpolicyk8s.io)",fieldPath=".rules"
type AdmissionPolicySpec struct {
	WebhookSpec  `json:",inline"`
	ModuleSpec   `json:",inline"`
	RevisionSpec `json:",inline"`

	// Shadow is a candidate version evaluated beside the serving one on the same requests,
	// never answering them: status.shadow and the server's metrics report where the two
	// answers differ (docs/operator.md, "Changing a policy safely").
	// +optional
	Shadow *PolicyShadow `json:"shadow,omitempty"`

	// Mutating says whether the policy may mutate requests.
	Mutating bool `json:"mutating"`

	// Message replaces the policy's rejection message; the policy's own message goes to
	// status.details.causes.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`
}

// PolicyGroupMember is one policy of a group, called by name in the group's expression.
type PolicyGroupMember struct {
	ModuleSpec `json:",inline"`
}

// ClusterPolicyGroupMember is one policy of a ClusterAdmissionPolicyGroup.
type ClusterPolicyGroupMember struct {
	ModuleSpec `json:",inline"`
	// ContextAwareResources are the kinds the member may read from the cluster.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ContextAwareResources []ContextAwareResource `json:"contextAwareResources,omitempty"`
}

// GroupSpec holds what both group kinds add to WebhookSpec.
type GroupSpec struct {
	// Expression combines the members' verdicts: member names called as functions, with
	// &&, || and !, e.g. "signed() || (trusted_registry() && !latest_tag())".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Expression string `json:"expression"`
	// Message is the rejection message when the expression is false.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message"`
}

// ClusterAdmissionPolicyGroupSpec is the desired state of a ClusterAdmissionPolicyGroup.
// +kubebuilder:validation:XValidation:rule="self.policies.all(k, !has(self.policies[k].timeoutEvalSeconds) || self.policies[k].timeoutEvalSeconds <= self.timeoutSeconds)",message="a member's timeoutEvalSeconds must not exceed timeoutSeconds (default 10)",fieldPath=".policies"
// +kubebuilder:validation:XValidation:rule="self.policies.map(k, has(self.policies[k].timeoutEvalSeconds) ? self.policies[k].timeoutEvalSeconds : 0).sum() <= self.timeoutSeconds",message="the members' timeoutEvalSeconds together must not exceed timeoutSeconds (default 10)",fieldPath=".policies"
// +kubebuilder:validation:XValidation:rule=`self.expression.findAll('[_a-zA-Z][_a-zA-Z0-9]*[ \t]*[(]').all(c, c.split('(')[0].trim() in self.policies)`,message="expression calls a policy that is not in policies",fieldPath=".expression"
type ClusterAdmissionPolicyGroupSpec struct {
	WebhookSpec  `json:",inline"`
	GroupSpec    `json:",inline"`
	RevisionSpec `json:",inline"`

	// Shadow is a candidate version evaluated beside the serving one on the same requests,
	// never answering them: status.shadow and the server's metrics report where the two
	// answers differ (docs/operator.md, "Changing a policy safely").
	// +optional
	Shadow *GroupShadow `json:"shadow,omitempty"`

	// Policies are the members, by name.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches('^[_a-zA-Z][_a-zA-Z0-9]*$') && !(k in ['as', 'break', 'const', 'continue', 'else', 'false', 'for', 'function', 'if', 'import', 'in', 'let', 'loop', 'package', 'namespace', 'null', 'return', 'true', 'var', 'void', 'while']))`,message="policy names must be identifiers ([_a-zA-Z][_a-zA-Z0-9]*) and not CEL reserved words"
	Policies map[string]ClusterPolicyGroupMember `json:"policies"`

	// NamespaceSelector selects the namespaces of the requests sent to the group.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// AllowInsideAdmissionControllerNamespace lets the group see requests in the namespace
	// tollgate runs in.
	// +optional
	AllowInsideAdmissionControllerNamespace bool `json:"allowInsideAdmissionControllerNamespace,omitempty"`

	// IncludeSkippedNamespaces names namespaces that the controller leaves out of every
	// cluster-wide policy (its --skip-namespaces) and that this group sees anyway.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	IncludeSkippedNamespaces []string `json:"includeSkippedNamespaces,omitempty"`
}

// AdmissionPolicyGroupSpec is the desired state of an AdmissionPolicyGroup.
// +kubebuilder:validation:XValidation:rule="self.policies.all(k, !has(self.policies[k].timeoutEvalSeconds) || self.policies[k].timeoutEvalSeconds <= self.timeoutSeconds)",message="a member's timeoutEvalSeconds must not exceed timeoutSeconds (default 10)",fieldPath=".policies"
// +kubebuilder:validation:XValidation:rule="self.policies.map(k, has(self.policies[k].timeoutEvalSeconds) ? self.policies[k].timeoutEvalSeconds : 0).sum() <= self.timeoutSeconds",message="the members' timeoutEvalSeconds together must not exceed timeoutSeconds (default 10)",fieldPath=".policies"
// +kubebuilder:validation:XValidation:rule=`self.expression.findAll('[_a-zA-Z][_a-zA-Z0-9]*[ \t]*[(]').all(c, c.split('(')[0].trim() in self.policies)`,message="expression calls a policy that is not in policies",fieldPath=".expression"
// +kubebuilder:validation:XValidation:rule=`self.rules.all(r, !(has(r.apiGroups) && r.apiGroups.exists(g, g == '*') && r.resources.exists(x, x == '*' || x == '*/*')))`,message="an AdmissionPolicyGroup may not match every resource of every group (apiGroups '*' with resources '*' or '*/*')",fieldPath=".rules"
// +kubebuilder:validation:XValidation:rule=`self.rules.all(r, !(has(r.apiGroups) && r.apiGroups.exists(g, g == 'wgpolicyk8s.io' || g == '*') && r.resources.exists(x, x == 'policyreports' || x == '*' || x == '*/*' || x.startsWith('policyreports/'))))`,message="an AdmissionPolicyGroup may not match policyreports (group wgpolicyk8s.io)",fieldPath=".rules"
type AdmissionPolicyGroupSpec struct {
	WebhookSpec  `json:",inline"`
	GroupSpec    `json:",inline"`
	RevisionSpec `json:",inline"`

	// Shadow is a candidate version evaluated beside the serving one on the same requests,
	// never answering them: status.shadow and the server's metrics report where the two
	// answers differ (docs/operator.md, "Changing a policy safely").
	// +optional
	Shadow *GroupShadow `json:"shadow,omitempty"`

	// Policies are the members, by name.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches('^[_a-zA-Z][_a-zA-Z0-9]*$') && !(k in ['as', 'break', 'const', 'continue', 'else', 'false', 'for', 'function', 'if', 'import', 'in', 'let', 'loop', 'package', 'namespace', 'null', 'return', 'true', 'var', 'void', 'while']))`,message="policy names must be identifiers ([_a-zA-Z][_a-zA-Z0-9]*) and not CEL reserved words"
	Policies map[string]PolicyGroupMember `json:"policies"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cap
// +kubebuilder:printcolumn:name="Policy Server",type=string,JSONPath=`.spec.policyServer`
// +kubebuilder:printcolumn:name="Mutating",type=boolean,JSONPath=`.spec.mutating`
// +kubebuilder:printcolumn:name="BackgroundAudit",type=boolean,JSONPath=`.spec.backgroundAudit`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Observed mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.policyStatus`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.metadata.annotations.io\.kubewarden\.policy\.severity`,priority=1
// +kubebuilder:printcolumn:name="Category",type=string,JSONPath=`.metadata.annotations.io\.kubewarden\.policy\.category`,priority=1

// ClusterAdmissionPolicy is a policy for requests in every namespace (and cluster-scoped ones).
type ClusterAdmissionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterAdmissionPolicySpec `json:"spec,omitempty"`
	Status PolicyStatus               `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterAdmissionPolicyList is a list of ClusterAdmissionPolicy.
type ClusterAdmissionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAdmissionPolicy `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ap
// +kubebuilder:printcolumn:name="Policy Server",type=string,JSONPath=`.spec.policyServer`
// +kubebuilder:printcolumn:name="Mutating",type=boolean,JSONPath=`.spec.mutating`
// +kubebuilder:printcolumn:name="BackgroundAudit",type=boolean,JSONPath=`.spec.backgroundAudit`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Observed mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.policyStatus`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.metadata.annotations.io\.kubewarden\.policy\.severity`,priority=1
// +kubebuilder:printcolumn:name="Category",type=string,JSONPath=`.metadata.annotations.io\.kubewarden\.policy\.category`,priority=1

// AdmissionPolicy is a policy for the requests of its own namespace.
type AdmissionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AdmissionPolicySpec `json:"spec,omitempty"`
	Status PolicyStatus        `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AdmissionPolicyList is a list of AdmissionPolicy.
type AdmissionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdmissionPolicy `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=capg
// +kubebuilder:printcolumn:name="Policy Server",type=string,JSONPath=`.spec.policyServer`
// +kubebuilder:printcolumn:name="Mutating",type=boolean,JSONPath=`.spec.mutating`
// +kubebuilder:printcolumn:name="BackgroundAudit",type=boolean,JSONPath=`.spec.backgroundAudit`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Observed mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.policyStatus`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterAdmissionPolicyGroup combines several policies with a boolean expression, for requests
// in every namespace.
type ClusterAdmissionPolicyGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterAdmissionPolicyGroupSpec `json:"spec,omitempty"`
	Status PolicyStatus                    `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterAdmissionPolicyGroupList is a list of ClusterAdmissionPolicyGroup.
type ClusterAdmissionPolicyGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAdmissionPolicyGroup `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=apg
// +kubebuilder:printcolumn:name="Policy Server",type=string,JSONPath=`.spec.policyServer`
// +kubebuilder:printcolumn:name="Mutating",type=boolean,JSONPath=`.spec.mutating`
// +kubebuilder:printcolumn:name="BackgroundAudit",type=boolean,JSONPath=`.spec.backgroundAudit`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Observed mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.policyStatus`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// AdmissionPolicyGroup combines several policies with a boolean expression, for the requests of
// its own namespace.
type AdmissionPolicyGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AdmissionPolicyGroupSpec `json:"spec,omitempty"`
	Status PolicyStatus             `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AdmissionPolicyGroupList is a list of AdmissionPolicyGroup.
type AdmissionPolicyGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdmissionPolicyGroup `json:"items"`
}
