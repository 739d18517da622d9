// Package admission turns AdmissionReviews into policy inputs and policy
// answers into AdmissionResponses: it parses an admission.k8s.io/v1
// AdmissionReview (or a bare AdmissionRequest), builds the response a webhook
// returns (status, warnings, audit annotations, base64 JSONPatch), and computes
// the minimal, deterministic RFC 6902 JSONPatch between two JSON documents.
//
// It must not know about Wasm, HTTP, policy configuration or how verdicts are
// produced.
package admission
