package protocol

import "encoding/json"

// ValidationRequest is the payload of the waPC `validate` operation.
//
// For Kubernetes policies Request holds an AdmissionRequest (the `request`
// field of an admission.k8s.io/v1 AdmissionReview); for raw policies it holds
// any JSON value. Settings is always a JSON object ({} when none were given).
type ValidationRequest struct {
	Request  json.RawMessage `json:"request"`
	Settings json.RawMessage `json:"settings"`
}

// ValidationResponse is what a policy answers to `validate`.
type ValidationResponse struct {
	Accepted bool `json:"accepted"`
	// Message explains a rejection (optional).
	Message *string `json:"message,omitempty"`
	// Code is the HTTP status code of a rejection (optional).
	Code *uint16 `json:"code,omitempty"`
	// MutatedObject, when present, is the whole object as the policy wants it
	// stored; the host turns it into a JSONPatch against the request object.
	MutatedObject json.RawMessage `json:"mutated_object,omitempty"`
	// AuditAnnotations are added to the audit event of the request.
	AuditAnnotations map[string]string `json:"audit_annotations,omitempty"`
	// Warnings are returned to the API client.
	Warnings []string `json:"warnings,omitempty"`
}

// SettingsValidationResponse is what a policy answers to `validate_settings`.
type SettingsValidationResponse struct {
	Valid   bool    `json:"valid"`
	Message *string `json:"message,omitempty"`
}

// KubernetesAdmissionRequest is the AdmissionRequest carried by a
// ValidationRequest of a Kubernetes policy, with the objects left as raw JSON
// so that a guest decodes only what it needs.
type KubernetesAdmissionRequest struct {
	UID                string                `json:"uid"`
	Kind               GroupVersionKind      `json:"kind"`
	Resource           GroupVersionResource  `json:"resource"`
	SubResource        string                `json:"subResource,omitempty"`
	RequestKind        *GroupVersionKind     `json:"requestKind,omitempty"`
	RequestResource    *GroupVersionResource `json:"requestResource,omitempty"`
	RequestSubResource string                `json:"requestSubResource,omitempty"`
	Name               string                `json:"name,omitempty"`
	Namespace          string                `json:"namespace,omitempty"`
	Operation          string                `json:"operation"`
	UserInfo           UserInfo              `json:"userInfo"`
	Object             json.RawMessage       `json:"object,omitempty"`
	OldObject          json.RawMessage       `json:"oldObject,omitempty"`
	DryRun             *bool                 `json:"dryRun,omitempty"`
	Options            json.RawMessage       `json:"options,omitempty"`
}

// GroupVersionKind names a kind.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// GroupVersionResource names a resource.
type GroupVersionResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// UserInfo describes the user that made the request.
type UserInfo struct {
	Username string              `json:"username,omitempty"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}
