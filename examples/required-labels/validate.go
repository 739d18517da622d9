package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	kubewarden "github.com/kubewarden/policy-sdk-go"
)

// RejectionCode is the status code of a rejection: 422 (Unprocessable Entity) is what the
// Kubernetes API server itself answers for an object that is well formed but invalid.
const RejectionCode = 422

// BadRequestCode is the status code when the request itself cannot be decoded.
const BadRequestCode = 400

// object is the part of any Kubernetes object the policy reads.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name         string            `json:"name"`
		GenerateName string            `json:"generateName"`
		Namespace    string            `json:"namespace"`
		Labels       map[string]string `json:"labels"`
	} `json:"metadata"`
}

// validationRequest is the part of the ValidationRequest the policy reads. Decoding only these
// fields (rather than protocol.ValidationRequest with the whole AdmissionRequest) keeps TinyGo's
// reflection-based encoding/json off the hot path.
type validationRequest struct {
	Request struct {
		Object json.RawMessage `json:"object"`
	} `json:"request"`
	Settings json.RawMessage `json:"settings"`
}

// settingsCache keeps the last settings parsed, keyed by their JSON: the host sends the same
// settings with every request, and compiling the regular expressions each time would dominate
// the evaluation. A module instance serves one policy, so one entry is enough.
var settingsCache struct {
	raw      string
	settings *Settings
}

func cachedSettings(raw []byte) (*Settings, error) {
	if settingsCache.settings != nil && settingsCache.raw == string(raw) {
		return settingsCache.settings, nil
	}
	s, err := parseSettings(raw)
	if err != nil {
		return nil, err
	}
	settingsCache.raw, settingsCache.settings = string(raw), s
	return s, nil
}

// validate is the waPC operation validate.
func validate(payload []byte) ([]byte, error) {
	var req validationRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("cannot decode the validation request: %v", err)),
			BadRequestCode)
	}
	settings, err := cachedSettings(req.Settings)
	if err != nil {
		// The host validated the settings at load time; this only happens when it did not.
		return kubewarden.RejectRequest(kubewarden.Message("invalid settings: "+err.Error()), BadRequestCode)
	}
	raw := bytes.TrimSpace(req.Request.Object)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		// DELETE and CONNECT carry no object: there are no labels to check.
		return kubewarden.AcceptRequest()
	}
	var obj object
	if err := json.Unmarshal(raw, &obj); err != nil {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("cannot decode the object's metadata: %v", err)),
			BadRequestCode)
	}
	if problems := settings.violations(obj.Metadata.Labels); len(problems) > 0 {
		return kubewarden.RejectRequest(
			kubewarden.Message(describe(obj)+": "+strings.Join(problems, "; ")),
			RejectionCode)
	}
	return kubewarden.AcceptRequest()
}

// violations lists, in a stable order, every way labels break the settings.
func (s *Settings) violations(labels map[string]string) []string {
	var problems []string
	for _, label := range s.MandatoryLabels {
		if _, ok := labels[label]; !ok {
			problems = append(problems, fmt.Sprintf("mandatory label %q is missing", label))
		}
	}
	for _, label := range s.DeniedLabels {
		if _, ok := labels[label]; ok {
			problems = append(problems, fmt.Sprintf("label %q is denied", label))
		}
	}
	constrained := make([]string, 0, len(s.constraints))
	for label := range s.constraints {
		constrained = append(constrained, label)
	}
	sort.Strings(constrained)
	for _, label := range constrained {
		value, ok := labels[label]
		if ok && !s.constraints[label].MatchString(value) {
			problems = append(problems, fmt.Sprintf("label %q has value %q, which does not match %s",
				label, value, s.ConstrainedLabels[label]))
		}
	}
	return problems
}

// describe names the object in a message, e.g. `Pod default/nginx`.
func describe(obj object) string {
	name := obj.Metadata.Name
	if name == "" && obj.Metadata.GenerateName != "" {
		name = obj.Metadata.GenerateName + "*"
	}
	if obj.Metadata.Namespace != "" {
		name = obj.Metadata.Namespace + "/" + name
	}
	kind := obj.Kind
	if kind == "" {
		kind = "object"
	}
	return strings.TrimSpace(kind + " " + name)
}
