package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

type response struct {
	Accepted bool    `json:"accepted"`
	Message  *string `json:"message"`
	Code     *uint16 `json:"code"`
}

func readFixture(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidate(t *testing.T) {
	settings := readFixture(t, "settings.json")
	tests := []struct {
		name        string
		fixture     string
		settings    json.RawMessage
		wantAccept  bool
		wantMessage string
	}{
		{name: "compliant deployment", fixture: "deployment-compliant.json", settings: settings, wantAccept: true},
		{
			name: "missing mandatory label", fixture: "pod-missing-label.json", settings: settings,
			wantMessage: `Pod shop/nginx: mandatory label "owner" is missing`,
		},
		{
			name: "denied label", fixture: "pod-denied-label.json", settings: settings,
			wantMessage: `Pod shop/nginx: label "debug" is denied`,
		},
		{
			name: "constrained label value", fixture: "namespace-bad-value.json", settings: settings,
			wantMessage: `Namespace shop: label "env" has value "production", which does not match prod|staging|dev-[a-z0-9]+`,
		},
		{
			name: "no labels at all lists every problem", fixture: "pod-no-labels.json", settings: settings,
			wantMessage: `Pod shop/bare: mandatory label "app.kubernetes.io/name" is missing; mandatory label "owner" is missing`,
		},
		{name: "empty settings accept everything", fixture: "pod-no-labels.json", settings: json.RawMessage(`{}`), wantAccept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, err := json.Marshal(map[string]json.RawMessage{"request": readFixture(t, tt.fixture), "settings": tt.settings})
			if err != nil {
				t.Fatal(err)
			}
			out, err := validate(payload)
			if err != nil {
				t.Fatal(err)
			}
			var resp response
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			if resp.Accepted != tt.wantAccept {
				t.Fatalf("accepted = %v, want %v (%s)", resp.Accepted, tt.wantAccept, out)
			}
			if tt.wantAccept {
				if resp.Message != nil || resp.Code != nil {
					t.Errorf("accepted with message or code: %s", out)
				}
				return
			}
			if resp.Message == nil || *resp.Message != tt.wantMessage {
				t.Errorf("message = %s, want %q", out, tt.wantMessage)
			}
			if resp.Code == nil || *resp.Code != RejectionCode {
				t.Errorf("code = %s, want %d", out, RejectionCode)
			}
		})
	}
}

func TestValidateDeleteHasNoObject(t *testing.T) {
	payload := []byte(`{"request": {"uid": "1", "operation": "DELETE", "object": null}, "settings": {"mandatory_labels": ["owner"]}}`)
	out, err := validate(payload)
	if err != nil {
		t.Fatal(err)
	}
	var resp response
	if err := json.Unmarshal(out, &resp); err != nil || !resp.Accepted {
		t.Errorf("got %s, want accepted", out)
	}
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		name        string
		settings    json.RawMessage
		wantMessage string // empty: valid
	}{
		{name: "example settings", settings: readFixture(t, "settings.json")},
		{name: "empty object", settings: json.RawMessage(`{}`)},
		{name: "null", settings: json.RawMessage(`null`)},
		{
			name: "bad regular expression", settings: readFixture(t, "settings-bad-regex.json"),
			wantMessage: `constrained_labels["env"]: invalid regular expression "(prod|staging": error parsing regexp: missing closing ): ` + "`^(?:(prod|staging)$`",
		},
		{
			name: "label mandatory and denied", settings: readFixture(t, "settings-contradiction.json"),
			wantMessage: `label "debug" is in both mandatory_labels and denied_labels`,
		},
		{
			name: "label denied and constrained", settings: json.RawMessage(`{"denied_labels": ["env"], "constrained_labels": {"env": "prod"}}`),
			wantMessage: `label "env" is in both denied_labels and constrained_labels`,
		},
		{
			name: "unknown field", settings: readFixture(t, "settings-unknown-field.json"),
			wantMessage: `unknown settings field "required_labels" (known fields: constrained_labels, denied_labels, mandatory_labels)`,
		},
		{
			name: "wrong type", settings: readFixture(t, "settings-wrong-type.json"),
			wantMessage: `mandatory_labels must be a list of label names, got "owner"`,
		},
		{
			name: "empty label name", settings: json.RawMessage(`{"denied_labels": ["debug", " "]}`),
			wantMessage: `denied_labels[1]: label name must not be empty`,
		},
		{
			name: "not an object", settings: json.RawMessage(`["owner"]`),
			wantMessage: `settings must be a JSON object: json: cannot unmarshal array into Go value of type map[string]json.RawMessage`,
		},
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
				t.Fatalf("valid = %v, want %v (%s)", resp.Valid, tt.wantMessage == "", out)
			}
			if tt.wantMessage != "" && (resp.Message == nil || *resp.Message != tt.wantMessage) {
				t.Errorf("message = %s\nwant %q", out, tt.wantMessage)
			}
		})
	}
}

func FuzzValidateSettings(f *testing.F) {
	f.Add([]byte(`{"mandatory_labels": ["a"], "constrained_labels": {"b": "x+"}}`))
	f.Add([]byte(`{"constrained_labels": {"b": "("}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, settings []byte) {
		out, err := validateSettings(settings)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
	})
}
