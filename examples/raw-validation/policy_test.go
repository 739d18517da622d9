package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func fixture(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requestOf returns the raw request in a testdata file of the form {"request": ...}.
func requestOf(t *testing.T, name string) json.RawMessage {
	t.Helper()
	var env struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(fixture(t, name), &env); err != nil {
		t.Fatal(err)
	}
	return env.Request
}

func TestValidate(t *testing.T) {
	settings := fixture(t, "settings.json")
	tests := []struct {
		name        string
		request     json.RawMessage
		settings    json.RawMessage
		wantMessage string // empty: accepted
		wantCode    uint16
	}{
		{name: "allowed user and action", request: requestOf(t, "request-accept.json"), settings: settings},
		{name: "bare request form", request: fixture(t, "bare-request-accept.json"), settings: settings},
		{
			name: "user not allowed", request: requestOf(t, "request-user-denied.json"), settings: settings,
			wantMessage: `user "mallory" is not allowed (allowed users: alice, bob)`, wantCode: ForbiddenCode,
		},
		{
			name: "action not allowed", request: requestOf(t, "request-action-denied.json"), settings: settings,
			wantMessage: `action "escalate" on "clusterroles/admin" is not allowed (allowed actions: get, list, delete)`, wantCode: ForbiddenCode,
		},
		{
			name: "any action when none listed", request: requestOf(t, "request-action-denied.json"),
			settings: json.RawMessage(`{"allowed_users": ["bob"]}`),
		},
		{
			name: "no user", request: requestOf(t, "request-no-user.json"), settings: settings,
			wantMessage: `the request has no "user"`, wantCode: BadRequestCode,
		},
		{
			name: "not an access request", request: json.RawMessage(`[1, 2]`), settings: settings,
			wantMessage: "the request is not an access request {user, action, resource}: json: cannot unmarshal array into Go struct field rawValidationRequest.request of type main.AccessRequest",
			wantCode:    BadRequestCode,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, _ := json.Marshal(map[string]json.RawMessage{"request": tt.request, "settings": tt.settings})
			out, err := validate(payload)
			if err != nil {
				t.Fatal(err)
			}
			var resp struct {
				Accepted bool    `json:"accepted"`
				Message  *string `json:"message"`
				Code     *uint16 `json:"code"`
			}
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Accepted != (tt.wantMessage == "") {
				t.Fatalf("accepted = %v (%s)", resp.Accepted, out)
			}
			if tt.wantMessage == "" {
				return
			}
			if resp.Message == nil || *resp.Message != tt.wantMessage {
				t.Errorf("message: got %s\nwant %q", out, tt.wantMessage)
			}
			if resp.Code == nil || *resp.Code != tt.wantCode {
				t.Errorf("code: got %s, want %d", out, tt.wantCode)
			}
		})
	}
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		name        string
		settings    json.RawMessage
		wantMessage string
	}{
		{name: "example", settings: fixture(t, "settings.json")},
		{name: "no users", settings: fixture(t, "settings-no-users.json"), wantMessage: "allowed_users must list at least one user"},
		{name: "empty settings", settings: json.RawMessage(`{}`), wantMessage: "allowed_users must list at least one user"},
		{
			name: "unknown field", settings: fixture(t, "settings-unknown-field.json"),
			wantMessage: `settings: json: unknown field "allowed_verbs" (fields: allowed_users: list of strings, allowed_actions: list of strings)`,
		},
		{name: "empty user", settings: json.RawMessage(`{"allowed_users": ["alice", ""]}`), wantMessage: "allowed_users[1]: user must not be empty"},
		{name: "empty action", settings: json.RawMessage(`{"allowed_users": ["alice"], "allowed_actions": [" "]}`), wantMessage: "allowed_actions[0]: action must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := validateSettings(tt.settings)
			if err != nil {
				t.Fatal(err)
			}
			var resp struct {
				Valid   bool    `json:"valid"`
				Message *string `json:"message"`
			}
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Valid != (tt.wantMessage == "") {
				t.Fatalf("valid = %v (%s)", resp.Valid, out)
			}
			if tt.wantMessage != "" && (resp.Message == nil || *resp.Message != tt.wantMessage) {
				t.Errorf("message: got %s\nwant %q", out, tt.wantMessage)
			}
		})
	}
}

// FuzzValidate checks that any payload gives a JSON answer, never a panic.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(`{"request": {"user": "alice", "action": "get"}, "settings": {"allowed_users": ["alice"]}}`))
	f.Add([]byte(`{"request": "x", "settings": {}}`))
	f.Add([]byte(`{"request": {"user": 1}, "settings": {"allowed_users": [null]}}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		out, err := validate(payload)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
	})
}
