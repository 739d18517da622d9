package kubewarden

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// ParseValidationRequest decodes the payload of `validate` for a Kubernetes
// policy: it returns the admission request and, when settings is a non-nil
// pointer, decodes the settings into it (absent, null or {} settings leave it
// as it is, so defaults set before the call survive).
func ParseValidationRequest(payload []byte, settings any) (protocol.KubernetesAdmissionRequest, error) {
	var vr protocol.ValidationRequest
	var req protocol.KubernetesAdmissionRequest
	if err := json.Unmarshal(payload, &vr); err != nil {
		return req, fmt.Errorf("kubewarden: validation request: %w", err)
	}
	if isNull(vr.Request) {
		return req, errors.New(`kubewarden: validation request: no "request"`)
	}
	if err := json.Unmarshal(vr.Request, &req); err != nil {
		return req, fmt.Errorf("kubewarden: validation request: field \"request\": %w", err)
	}
	if err := ParseSettings(vr.Settings, settings); err != nil {
		return req, err
	}
	return req, nil
}

// ParseSettings decodes settings JSON (the payload of `validate_settings`, or
// the settings of a validation request) into the value settings points to.
// Absent or null settings leave it as it is.
func ParseSettings(raw []byte, settings any) error {
	if settings == nil || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, settings); err != nil {
		return fmt.Errorf("kubewarden: settings: %w", err)
	}
	return nil
}

func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}
