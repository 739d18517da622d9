package main

import (
	"encoding/json"
	"fmt"
	"strings"

	kubewarden "github.com/kubewarden/policy-sdk-go"
)

// Codes of the rejections.
const (
	// ForbiddenCode: the user or action is not allowed.
	ForbiddenCode = 403
	// BadRequestCode: the request is not an access request.
	BadRequestCode = 400
)

// AccessRequest is the raw request this policy validates.
type AccessRequest struct {
	User     string `json:"user"`
	Action   string `json:"action"`
	Resource string `json:"resource"`
}

// rawValidationRequest is what the host sends to a raw policy: the raw request as is, and the
// settings.
type rawValidationRequest struct {
	Request  AccessRequest   `json:"request"`
	Settings json.RawMessage `json:"settings"`
}

// validate is the waPC operation validate.
func validate(payload []byte) ([]byte, error) {
	var req rawValidationRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("the request is not an access request {user, action, resource}: %v", err)),
			BadRequestCode)
	}
	settings, err := parseSettings(req.Settings)
	if err != nil {
		return kubewarden.RejectRequest(kubewarden.Message("invalid settings: "+err.Error()), BadRequestCode)
	}
	r := req.Request
	var missing []string
	if r.User == "" {
		missing = append(missing, `"user"`)
	}
	if r.Action == "" {
		missing = append(missing, `"action"`)
	}
	if len(missing) > 0 {
		return kubewarden.RejectRequest(
			kubewarden.Message("the request has no "+strings.Join(missing, " and ")),
			BadRequestCode)
	}
	if !contains(settings.AllowedUsers, r.User) {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("user %q is not allowed (allowed users: %s)",
				r.User, strings.Join(settings.AllowedUsers, ", "))),
			ForbiddenCode)
	}
	if len(settings.AllowedActions) > 0 && !contains(settings.AllowedActions, r.Action) {
		return kubewarden.RejectRequest(
			kubewarden.Message(fmt.Sprintf("action %q on %q is not allowed (allowed actions: %s)",
				r.Action, r.Resource, strings.Join(settings.AllowedActions, ", "))),
			ForbiddenCode)
	}
	return kubewarden.AcceptRequest()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
