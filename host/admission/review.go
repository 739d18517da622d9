package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

var (
	// ErrBadJSON: the input is not valid JSON.
	ErrBadJSON = errors.New("invalid JSON")
	// ErrNotAdmission: the JSON is neither an AdmissionReview nor an AdmissionRequest.
	ErrNotAdmission = errors.New("not an AdmissionReview or AdmissionRequest")
)

// Request is a parsed AdmissionRequest. Raw holds the request exactly as
// received (what a policy is given); the other fields are what the host needs.
type Request struct {
	Raw       json.RawMessage
	UID       string
	Operation string
	Kind      GroupVersionKind
	Resource  GroupVersionResource
	Namespace string
	Name      string
	// Object is the request's object (null/absent for DELETE and CONNECT).
	Object json.RawMessage
}

// GroupVersionKind of the request (the wire type policies see).
type GroupVersionKind = protocol.GroupVersionKind

// GroupVersionResource of the request (the wire type policies see).
type GroupVersionResource = protocol.GroupVersionResource

type requestFields struct {
	UID       string               `json:"uid"`
	Operation string               `json:"operation"`
	Kind      GroupVersionKind     `json:"kind"`
	Resource  GroupVersionResource `json:"resource"`
	Namespace string               `json:"namespace"`
	Name      string               `json:"name"`
	Object    json.RawMessage      `json:"object"`
}

// ParseReview reads an AdmissionReview (`{"apiVersion": "admission.k8s.io/v1",
// "kind": "AdmissionReview", "request": {...}}`) or a bare AdmissionRequest.
func ParseReview(data []byte) (*Request, error) {
	data = bytes.TrimSpace(data)
	if r, ok := parseReviewFast(data); ok {
		return r, nil
	}
	return parseReviewReference(data)
}

// parseReviewReference is ParseReview with encoding/json: the definition of
// what ParseReview answers, and the path of every error.
func parseReviewReference(data []byte) (*Request, error) {
	if err := CheckJSON(data); err != nil {
		return nil, err
	}
	var envelope struct {
		Kind       json.RawMessage `json:"kind"` // a string in a review, an object in a request
		APIVersion json.RawMessage `json:"apiVersion"`
		Request    json.RawMessage `json:"request"`
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("%w: the document is a JSON %s, not an object", ErrNotAdmission, jsonKind(data[0]))
	}
	if err := json.Unmarshal(data, &envelope); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAdmission, err)
	}
	raw := data
	var kind, apiVersion string
	_ = json.Unmarshal(envelope.Kind, &kind)
	_ = json.Unmarshal(envelope.APIVersion, &apiVersion)
	if kind == "AdmissionReview" || len(envelope.Request) > 0 {
		if kind != "" && kind != "AdmissionReview" {
			return nil, fmt.Errorf("%w: kind is %q", ErrNotAdmission, kind)
		}
		if apiVersion != "" && !strings.HasPrefix(apiVersion, "admission.k8s.io/") {
			return nil, fmt.Errorf("%w: apiVersion is %q, want admission.k8s.io/v1", ErrNotAdmission, apiVersion)
		}
		raw = bytes.TrimSpace(envelope.Request)
		if len(raw) == 0 || string(raw) == "null" {
			return nil, fmt.Errorf("%w: the AdmissionReview has no request", ErrNotAdmission)
		}
	}
	return parseRequestReference(raw)
}

// ParseRequest reads a bare AdmissionRequest.
func ParseRequest(raw []byte) (*Request, error) {
	if r, ok := parseRequestFast(raw); ok {
		return r, nil
	}
	return parseRequestReference(raw)
}

func parseRequestReference(raw []byte) (*Request, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("%w: the request is not a JSON object", ErrNotAdmission)
	}
	var f requestFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAdmission, err)
	}
	var missing []string
	if f.UID == "" {
		missing = append(missing, "uid")
	}
	if f.Operation == "" {
		missing = append(missing, "operation")
	}
	if f.Kind.Kind == "" {
		missing = append(missing, "kind.kind")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %s", ErrNotAdmission, strings.Join(missing, ", "))
	}
	switch f.Operation {
	case "CREATE", "UPDATE", "DELETE", "CONNECT":
	default:
		return nil, fmt.Errorf("%w: operation %q (want CREATE, UPDATE, DELETE or CONNECT)", ErrNotAdmission, f.Operation)
	}
	obj := bytes.TrimSpace(f.Object)
	if string(obj) == "null" {
		obj = nil
	}
	return &Request{
		Raw: raw, UID: f.UID, Operation: f.Operation, Kind: f.Kind, Resource: f.Resource,
		Namespace: f.Namespace, Name: f.Name, Object: obj,
	}, nil
}

// CheckJSON returns ErrBadJSON with the line and column of the first syntax error.
func CheckJSON(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: empty input", ErrBadJSON)
	}
	if json.Valid(data) {
		return nil
	}
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		return fmt.Errorf("%w at line %d, column %d: %v", ErrBadJSON, line, col, se)
	}
	return fmt.Errorf("%w: %v", ErrBadJSON, err)
}

func position(data []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < offset-1 && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}
