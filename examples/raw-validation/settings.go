package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	kubewarden "github.com/kubewarden/policy-sdk-go"
)

// Settings says who may do what.
type Settings struct {
	// AllowedUsers lists the users whose requests are accepted; it must not be empty.
	AllowedUsers []string `json:"allowed_users"`
	// AllowedActions lists the actions accepted; empty means any action.
	AllowedActions []string `json:"allowed_actions"`
}

// parseSettings decodes and checks settings; errors name the field and value at fault.
func parseSettings(raw []byte) (*Settings, error) {
	s := &Settings{}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(s); err != nil {
			return nil, fmt.Errorf("settings: %v (fields: allowed_users: list of strings, allowed_actions: list of strings)", err)
		}
	}
	if len(s.AllowedUsers) == 0 {
		return nil, fmt.Errorf("allowed_users must list at least one user")
	}
	for i, u := range s.AllowedUsers {
		if strings.TrimSpace(u) == "" {
			return nil, fmt.Errorf("allowed_users[%d]: user must not be empty", i)
		}
	}
	for i, a := range s.AllowedActions {
		if strings.TrimSpace(a) == "" {
			return nil, fmt.Errorf("allowed_actions[%d]: action must not be empty", i)
		}
	}
	return s, nil
}

// validateSettings is the waPC operation validate_settings.
func validateSettings(payload []byte) ([]byte, error) {
	if _, err := parseSettings(payload); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(err.Error()))
	}
	return kubewarden.AcceptSettings()
}
