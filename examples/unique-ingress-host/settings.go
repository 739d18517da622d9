package main

import (
	"bytes"
	"encoding/json"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Settings are the policy's settings.
type Settings struct {
	// AllowSameNamespace lets Ingresses of one namespace share a host (for instance one per
	// path); Ingresses of other namespaces still may not use it.
	AllowSameNamespace bool `json:"allowSameNamespace"`
}

// parseSettings decodes settings strictly: an unknown field or a wrong type is an error.
func parseSettings(raw []byte) (Settings, error) {
	var s Settings
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(&s)
	return s, err
}

func validateSettings(payload []byte) ([]byte, error) {
	if _, err := parseSettings(payload); err != nil {
		msg := "settings: " + err.Error()
		return json.Marshal(protocol.SettingsValidationResponse{Valid: false, Message: &msg})
	}
	return json.Marshal(protocol.SettingsValidationResponse{Valid: true})
}
