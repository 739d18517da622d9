package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	kubewarden "github.com/kubewarden/policy-sdk-go"
)

// Settings configures the policy. All fields are optional; empty settings accept everything.
type Settings struct {
	// MandatoryLabels must all be present.
	MandatoryLabels []string `json:"mandatory_labels"`
	// DeniedLabels must all be absent.
	DeniedLabels []string `json:"denied_labels"`
	// ConstrainedLabels maps a label to a regular expression (RE2 syntax) that its value must
	// match as a whole. A constrained label that is absent is accepted (make it mandatory too to
	// require it).
	ConstrainedLabels map[string]string `json:"constrained_labels"`

	// constraints holds ConstrainedLabels compiled, anchored at both ends.
	constraints map[string]*regexp.Regexp
}

// fieldKinds describes each settings field for error messages.
var fieldKinds = map[string]string{
	"mandatory_labels":   "a list of label names",
	"denied_labels":      "a list of label names",
	"constrained_labels": "an object mapping label names to regular expressions",
}

// parseSettings decodes and checks settings. Its errors name the field and value at fault.
func parseSettings(raw []byte) (*Settings, error) {
	s := &Settings{}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return s, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, fmt.Errorf("settings must be a JSON object: %v", err)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var target interface{}
		switch name {
		case "mandatory_labels":
			target = &s.MandatoryLabels
		case "denied_labels":
			target = &s.DeniedLabels
		case "constrained_labels":
			target = &s.ConstrainedLabels
		default:
			return nil, fmt.Errorf("unknown settings field %q (known fields: constrained_labels, denied_labels, mandatory_labels)", name)
		}
		if err := json.Unmarshal(fields[name], target); err != nil {
			return nil, fmt.Errorf("%s must be %s, got %s", name, fieldKinds[name], fields[name])
		}
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// check validates label names, compiles the regular expressions and finds contradictions.
func (s *Settings) check() error {
	mandatory := map[string]bool{}
	for i, label := range s.MandatoryLabels {
		if strings.TrimSpace(label) == "" {
			return fmt.Errorf("mandatory_labels[%d]: label name must not be empty", i)
		}
		mandatory[label] = true
	}
	denied := map[string]bool{}
	for i, label := range s.DeniedLabels {
		if strings.TrimSpace(label) == "" {
			return fmt.Errorf("denied_labels[%d]: label name must not be empty", i)
		}
		if mandatory[label] {
			return fmt.Errorf("label %q is in both mandatory_labels and denied_labels", label)
		}
		denied[label] = true
	}
	labels := make([]string, 0, len(s.ConstrainedLabels))
	for label := range s.ConstrainedLabels {
		labels = append(labels, label)
	}
	sort.Strings(labels)
	s.constraints = make(map[string]*regexp.Regexp, len(labels))
	for _, label := range labels {
		expr := s.ConstrainedLabels[label]
		if strings.TrimSpace(label) == "" {
			return fmt.Errorf("constrained_labels: label name must not be empty (expression %q)", expr)
		}
		if denied[label] {
			return fmt.Errorf("label %q is in both denied_labels and constrained_labels", label)
		}
		re, err := regexp.Compile("^(?:" + expr + ")$")
		if err != nil {
			return fmt.Errorf("constrained_labels[%q]: invalid regular expression %q: %v", label, expr, err)
		}
		s.constraints[label] = re
	}
	return nil
}

// validateSettings is the waPC operation validate_settings.
func validateSettings(payload []byte) ([]byte, error) {
	if _, err := parseSettings(payload); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(err.Error()))
	}
	return kubewarden.AcceptSettings()
}
