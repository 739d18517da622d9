package policytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// ParseAdmissionRequest decodes an AdmissionRequest, given either alone or as
// the "request" of an AdmissionReview.
func ParseAdmissionRequest(data []byte) (protocol.KubernetesAdmissionRequest, error) {
	var req protocol.KubernetesAdmissionRequest
	var probe struct {
		Kind    json.RawMessage `json:"kind"` // a string in a review, an object in a request
		Request json.RawMessage `json:"request"`
		UID     *string         `json:"uid"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return req, fmt.Errorf("not an AdmissionRequest or AdmissionReview: %w", err)
	}
	raw := data
	switch {
	case bytes.Equal(bytes.TrimSpace(probe.Kind), []byte(`"AdmissionReview"`)) || (probe.UID == nil && len(probe.Request) > 0):
		if len(bytes.TrimSpace(probe.Request)) == 0 || bytes.Equal(bytes.TrimSpace(probe.Request), []byte("null")) {
			return req, errors.New(`AdmissionReview without a "request"`)
		}
		raw = probe.Request
	case probe.UID == nil:
		return req, errors.New(`not an AdmissionRequest (no "uid") or AdmissionReview (no "request")`)
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return req, fmt.Errorf("AdmissionRequest: %w", err)
	}
	return req, nil
}

// BuildValidationRequest returns the `validate` payload for req with
// settings (any value encoding/json can encode; nil means {}).
func BuildValidationRequest(req protocol.KubernetesAdmissionRequest, settings any) ([]byte, error) {
	rawReq, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("policytest: encoding the request: %w", err)
	}
	rawSettings, err := encodeSettings(settings)
	if err != nil {
		return nil, err
	}
	return json.Marshal(protocol.ValidationRequest{Request: rawReq, Settings: rawSettings})
}

// BuildValidationRequestFromFixture reads an AdmissionRequest or
// AdmissionReview from the JSON file at path and returns the `validate`
// payload for it with settings.
func BuildValidationRequestFromFixture(path string, settings any) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policytest: %w", err)
	}
	req, err := ParseAdmissionRequest(data)
	if err != nil {
		return nil, fmt.Errorf("policytest: %s: %w", path, err)
	}
	return BuildValidationRequest(req, settings)
}

// BuildValidationRequestForObject returns the `validate` payload of a CREATE
// request for object (a Kubernetes object as any value encoding/json can
// encode), with kind and namespace taken from the object, and settings.
func BuildValidationRequestForObject(object any, settings any) ([]byte, error) {
	raw, err := json.Marshal(object)
	if err != nil {
		return nil, fmt.Errorf("policytest: encoding the object: %w", err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("policytest: the object is not a JSON object: %w", err)
	}
	group, version, ok := strings.Cut(meta.APIVersion, "/")
	if !ok {
		group, version = "", meta.APIVersion
	}
	req := protocol.KubernetesAdmissionRequest{
		UID:       "00000000-0000-0000-0000-000000000000",
		Kind:      protocol.GroupVersionKind{Group: group, Version: version, Kind: meta.Kind},
		Name:      meta.Metadata.Name,
		Namespace: meta.Metadata.Namespace,
		Operation: "CREATE",
		Object:    raw,
	}
	return BuildValidationRequest(req, settings)
}

func encodeSettings(settings any) (json.RawMessage, error) {
	if settings == nil {
		return json.RawMessage(`{}`), nil
	}
	raw, err := json.Marshal(settings)
	if err != nil {
		return nil, fmt.Errorf("policytest: encoding the settings: %w", err)
	}
	if bytes.Equal(raw, []byte("null")) {
		return json.RawMessage(`{}`), nil
	}
	return raw, nil
}

// DecodeValidationResponse decodes the answer of `validate`.
func DecodeValidationResponse(data []byte) (protocol.ValidationResponse, error) {
	var r protocol.ValidationResponse
	if err := strictUnmarshal(data, &r); err != nil {
		return r, fmt.Errorf("policytest: ValidationResponse: %w", err)
	}
	return r, nil
}

// DecodeSettingsValidationResponse decodes the answer of `validate_settings`.
func DecodeSettingsValidationResponse(data []byte) (protocol.SettingsValidationResponse, error) {
	var r protocol.SettingsValidationResponse
	if err := strictUnmarshal(data, &r); err != nil {
		return r, fmt.Errorf("policytest: SettingsValidationResponse: %w", err)
	}
	return r, nil
}

// strictUnmarshal rejects unknown fields, so a misspelt field in a policy's
// answer fails its tests instead of being ignored by the host.
func strictUnmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}
