package admission

import "encoding/json"

// PatchTypeJSONPatch is the only patch type admission webhooks return.
const PatchTypeJSONPatch = "JSONPatch"

// Response is an admission.k8s.io/v1 AdmissionResponse. Field order follows
// what kwctl prints (uid, allowed, patchType, patch, status, auditAnnotations,
// warnings) so scripts that grep its output keep working.
type Response struct {
	UID              string            `json:"uid"`
	Allowed          bool              `json:"allowed"`
	PatchType        *string           `json:"patchType,omitempty"`
	Patch            []byte            `json:"patch,omitempty"` // base64 in JSON
	Status           *Status           `json:"status,omitempty"`
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
	Warnings         []string          `json:"warnings,omitempty"`
}

// Status is the metav1.Status subset admission responses carry.
type Status struct {
	Message string         `json:"message,omitempty"`
	Code    int32          `json:"code,omitempty"`
	Details *StatusDetails `json:"details,omitempty"`
}

// StatusDetails carries causes (used for policy groups and message overrides).
type StatusDetails struct {
	Causes []StatusCause `json:"causes,omitempty"`
}

// StatusCause is one cause.
type StatusCause struct {
	Type    string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Field   string `json:"field,omitempty"`
}

// Verdict is what a policy decided, independent of transport.
type Verdict struct {
	Accepted         bool
	Message          string
	Code             int32
	Patch            []byte // RFC 6902 JSONPatch, nil when unmutated
	Warnings         []string
	AuditAnnotations map[string]string
}

// Review wraps a response into an AdmissionReview v1 document.
type Review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Response   *Response `json:"response"`
}

// NewReview returns the AdmissionReview envelope for r.
func NewReview(r *Response) Review {
	return Review{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Response: r}
}

// FromVerdict builds the AdmissionResponse for a verdict.
func FromVerdict(uid string, v Verdict) *Response {
	r := &Response{UID: uid, Allowed: v.Accepted, Warnings: v.Warnings, AuditAnnotations: v.AuditAnnotations}
	if !v.Accepted {
		r.Status = &Status{Message: v.Message, Code: v.Code}
	} else if v.Message != "" || v.Code != 0 {
		r.Status = &Status{Message: v.Message, Code: v.Code}
	}
	if v.Accepted && len(v.Patch) > 0 {
		pt := PatchTypeJSONPatch
		r.PatchType = &pt
		r.Patch = v.Patch
	}
	return r
}

// Errored builds the response for a request the policy could not evaluate:
// not allowed, with the error as message and code (500 when zero).
func Errored(uid string, code int32, err error) *Response {
	if code == 0 {
		code = 500
	}
	return &Response{UID: uid, Allowed: false, Status: &Status{Message: err.Error(), Code: code}}
}

// MarshalCompact is the one-line JSON form kwctl prints.
func (r *Response) MarshalCompact() ([]byte, error) { return json.Marshal(r) }
