package kubewarden

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Message is the optional text of a rejection.
type Message string

// Code is the optional HTTP status code of a rejection.
type Code uint16

const (
	// NoMessage builds a response without a message.
	NoMessage Message = ""
	// NoCode builds a response without a code.
	NoCode Code = 0
)

// ResponseOption adds optional fields to a ValidationResponse built by
// AcceptRequest, RejectRequest or MutateRequest.
type ResponseOption func(*protocol.ValidationResponse)

// WithWarnings adds warnings, which the API server returns to the client.
func WithWarnings(warnings ...string) ResponseOption {
	return func(r *protocol.ValidationResponse) {
		r.Warnings = append(r.Warnings, warnings...)
	}
}

// WithAuditAnnotations adds annotations to the audit event of the request.
func WithAuditAnnotations(annotations map[string]string) ResponseOption {
	return func(r *protocol.ValidationResponse) {
		if len(annotations) == 0 {
			return
		}
		if r.AuditAnnotations == nil {
			r.AuditAnnotations = make(map[string]string, len(annotations))
		}
		maps.Copy(r.AuditAnnotations, annotations)
	}
}

func respond(r protocol.ValidationResponse, opts []ResponseOption) ([]byte, error) {
	for _, opt := range opts {
		opt(&r)
	}
	return json.Marshal(r)
}

// AcceptRequest answers `validate`: the request is accepted.
func AcceptRequest(opts ...ResponseOption) ([]byte, error) {
	return respond(protocol.ValidationResponse{Accepted: true}, opts)
}

// RejectRequest answers `validate`: the request is rejected, with an optional
// message and code (NoMessage, NoCode to leave them out).
func RejectRequest(message Message, code Code, opts ...ResponseOption) ([]byte, error) {
	r := protocol.ValidationResponse{}
	if message != NoMessage {
		m := string(message)
		r.Message = &m
	}
	if code != NoCode {
		c := uint16(code)
		r.Code = &c
	}
	return respond(r, opts)
}

// MutateRequest answers `validate`: the request is accepted and the object is
// to be stored as newObject. newObject is encoded with encoding/json; a
// json.RawMessage or []byte is taken as the JSON text of the object. It must
// encode to a JSON object.
func MutateRequest(newObject any, opts ...ResponseOption) ([]byte, error) {
	var raw []byte
	switch o := newObject.(type) {
	case json.RawMessage:
		raw = o
	case []byte:
		raw = o
	default:
		var err error
		if raw, err = json.Marshal(newObject); err != nil {
			return nil, fmt.Errorf("kubewarden: encoding the mutated object: %w", err)
		}
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, fmt.Errorf("kubewarden: the mutated object must be a JSON object, got %.40q", trimmed)
	}
	return respond(protocol.ValidationResponse{Accepted: true, MutatedObject: trimmed}, opts)
}

// AcceptSettings answers `validate_settings`: the settings are valid.
func AcceptSettings() ([]byte, error) {
	return json.Marshal(protocol.SettingsValidationResponse{Valid: true})
}

// RejectSettings answers `validate_settings`: the settings are invalid, with
// an optional message saying why.
func RejectSettings(message Message) ([]byte, error) {
	r := protocol.SettingsValidationResponse{}
	if message != NoMessage {
		m := string(message)
		r.Message = &m
	}
	return json.Marshal(r)
}
