package config

import (
	"bytes"
	"encoding/json"
)

// Entry is one policies.yml entry as it is written (by the controller and
// `tollgate scaffold`): the same fields ParsePolicies reads into a Policy,
// in Kubewarden's shape. A policy has Module; a group has Expression and
// Policies (its members: Module, Settings, ContextAwareResources,
// HostCapabilities, TimeoutEvalSeconds). Either may have a Shadow, the
// candidate version evaluated beside it (see Shadow).
//
// What is written: a nil slice or map, a nil pointer and an empty string are
// left out; a non-nil empty slice is written as [] (contextAwareResources: []
// grants no resource, hostCapabilities: [] no capability, which is not what
// their absence means). A group's message is always written, as Kubewarden's
// controller does, and a policy's (or member's) module, even empty (which the
// reader refuses, naming the field). Keys are sorted, so the output depends on the values only.
type Entry struct {
	// NamespacedName is the controller's note of the policy resource the
	// entry comes from (read and ignored by ParsePolicies).
	NamespacedName        *NamespacedName
	Module                string
	PolicyMode            Mode
	AllowedToMutate       *bool
	Settings              json.RawMessage // a JSON object
	ContextAwareResources []ContextAwareResource
	HostCapabilities      []string
	Message               string
	TimeoutEvalSeconds    *int32
	Expression            string
	Policies              map[string]Entry
	// Shadow is the candidate version evaluated beside this one (see
	// Shadow); nil for none.
	Shadow *EntryShadow
}

// NamespacedName is Kubewarden's namespacedName of an entry.
type NamespacedName struct {
	Name      string `json:"Name"`
	Namespace string `json:"Namespace"`
}

// MarshalJSON writes the entry (see Entry). HTML characters are not
// escaped here; json.Marshal escapes them in the result, an Encoder with
// SetEscapeHTML(false) keeps them.
func (e Entry) MarshalJSON() ([]byte, error) {
	type wire struct { // fields in key order
		AllowedToMutate       *bool                   `json:"allowedToMutate,omitempty"`
		ContextAwareResources *[]ContextAwareResource `json:"contextAwareResources,omitempty"`
		Expression            string                  `json:"expression,omitempty"`
		HostCapabilities      *[]string               `json:"hostCapabilities,omitempty"`
		Message               *string                 `json:"message,omitempty"`
		Module                *string                 `json:"module,omitempty"`
		NamespacedName        *NamespacedName         `json:"namespacedName,omitempty"`
		Policies              *map[string]Entry       `json:"policies,omitempty"`
		PolicyMode            Mode                    `json:"policyMode,omitempty"`
		Settings              json.RawMessage         `json:"settings,omitempty"`
		Shadow                *EntryShadow            `json:"shadow,omitempty"`
		TimeoutEvalSeconds    *int32                  `json:"timeoutEvalSeconds,omitempty"`
	}
	w := wire{AllowedToMutate: e.AllowedToMutate, Expression: e.Expression,
		NamespacedName: e.NamespacedName, PolicyMode: e.PolicyMode, Settings: e.Settings,
		TimeoutEvalSeconds: e.TimeoutEvalSeconds, Shadow: e.Shadow}
	if e.ContextAwareResources != nil {
		w.ContextAwareResources = &e.ContextAwareResources
	}
	if e.HostCapabilities != nil {
		w.HostCapabilities = &e.HostCapabilities
	}
	group := e.Policies != nil || e.Expression != ""
	if e.Message != "" || group {
		w.Message = &e.Message
	}
	if e.Module != "" || !group {
		w.Module = &e.Module
	}
	if e.Policies != nil {
		w.Policies = &e.Policies
	}
	return marshalNoEscape(w)
}

// marshalNoEscape is json.Marshal without HTML escaping.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// MarshalPolicies writes a policies.yml of entries by id: JSON (which is
// YAML), indented, keys sorted at every level, with a final newline, so that
// the same entries always give the same bytes.
func MarshalPolicies(entries map[string]Entry) ([]byte, error) {
	if entries == nil {
		entries = map[string]Entry{}
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
