package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	kubewarden "github.com/kubewarden/policy-sdk-go"
)

// validateSettings accepts only empty settings: the policy has nothing to configure.
func validateSettings(payload []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return kubewarden.AcceptSettings()
	}
	var settings map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &settings); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(
			fmt.Sprintf("settings must be a JSON object: %v", err)))
	}
	if len(settings) > 0 {
		keys := make([]string, 0, len(settings))
		for k := range settings {
			keys = append(keys, fmt.Sprintf("%q", k))
		}
		sort.Strings(keys)
		return kubewarden.RejectSettings(kubewarden.Message(
			"this policy takes no settings; unknown field(s): " + strings.Join(keys, ", ")))
	}
	return kubewarden.AcceptSettings()
}
