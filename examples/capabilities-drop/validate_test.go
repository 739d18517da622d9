package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// response is the ValidationResponse as the host decodes it.
type response struct {
	Accepted      bool            `json:"accepted"`
	Message       *string         `json:"message"`
	Code          *uint16         `json:"code"`
	MutatedObject json.RawMessage `json:"mutated_object"`
}

// validateFixture runs validate on testdata/<name> (an AdmissionRequest) with empty settings.
func validateFixture(t *testing.T, name string) response {
	t.Helper()
	request, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(map[string]json.RawMessage{"request": request, "settings": json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := validate(payload)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	var resp response
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("validate returned %q: %v", out, err)
	}
	return resp
}

// dropLists returns, per "<field>/<container name>", the capabilities.drop list of every container.
func dropLists(t *testing.T, pod json.RawMessage) map[string][]string {
	t.Helper()
	var p struct {
		Spec map[string][]struct {
			Name            string `json:"name"`
			SecurityContext *struct {
				Capabilities *struct {
					Drop []string `json:"drop"`
				} `json:"capabilities"`
			} `json:"securityContext"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(pod, &p); err != nil {
		t.Fatalf("mutated_object %s: %v", pod, err)
	}
	got := map[string][]string{}
	for field, containers := range p.Spec {
		for _, c := range containers {
			var drop []string
			if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
				drop = c.SecurityContext.Capabilities.Drop
			}
			got[field+"/"+c.Name] = drop
		}
	}
	return got
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name     string
		fixture  string
		wantDrop map[string][]string // nil: accepted without mutation
	}{
		{
			name:    "containers and init containers that add capabilities drop BPF",
			fixture: "pod-adds-capabilities.json",
			wantDrop: map[string][]string{
				"initContainers/setup": {"BPF"},
				"containers/nginx":     {"ALL", "BPF"},
				"containers/sidecar":   nil,
			},
		},
		{
			name:    "ephemeral containers are mutated too",
			fixture: "pod-ephemeral-container.json",
			wantDrop: map[string][]string{
				"containers/nginx":             nil,
				"ephemeralContainers/debugger": {"BPF"},
			},
		},
		{name: "no capabilities added", fixture: "pod-no-capabilities.json"},
		{name: "BPF already dropped", fixture: "pod-already-drops-bpf.json"},
		{name: "not a Pod", fixture: "deployment.json"},
		{name: "DELETE has no object", fixture: "pod-delete.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := validateFixture(t, tt.fixture)
			if !resp.Accepted {
				t.Fatalf("rejected: %v", *resp.Message)
			}
			if tt.wantDrop == nil {
				if resp.MutatedObject != nil {
					t.Fatalf("mutated_object = %s, want none", resp.MutatedObject)
				}
				return
			}
			if got := dropLists(t, resp.MutatedObject); !reflect.DeepEqual(got, tt.wantDrop) {
				t.Errorf("drop lists = %v, want %v", got, tt.wantDrop)
			}
		})
	}
}

// TestMutationKeepsEverythingElse checks that the mutated Pod differs from the request object only
// by the added BPF entries: no field lost, no number reformatted.
func TestMutationKeepsEverythingElse(t *testing.T) {
	resp := validateFixture(t, "pod-adds-capabilities.json")
	var mutated map[string]interface{}
	if err := json.Unmarshal(resp.MutatedObject, &mutated); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join("testdata", "pod-adds-capabilities.json"))
	var req struct {
		Object map[string]interface{} `json:"object"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	// Apply the expected change to the original and compare whole objects.
	spec := req.Object["spec"].(map[string]interface{})
	setup := spec["initContainers"].([]interface{})[0].(map[string]interface{})
	setup["securityContext"].(map[string]interface{})["capabilities"].(map[string]interface{})["drop"] = []interface{}{"BPF"}
	nginx := spec["containers"].([]interface{})[0].(map[string]interface{})
	nginx["securityContext"].(map[string]interface{})["capabilities"].(map[string]interface{})["drop"] = []interface{}{"ALL", "BPF"}
	if !reflect.DeepEqual(mutated, req.Object) {
		t.Errorf("mutated object\n%s\ndiffers from the expected one beyond the BPF drop", resp.MutatedObject)
	}
}

func TestValidateBadPayload(t *testing.T) {
	out, err := validate([]byte(`{"request": 42}`))
	if err != nil {
		t.Fatal(err)
	}
	var resp response
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Accepted || resp.Message == nil || !strings.Contains(*resp.Message, "cannot decode") {
		t.Errorf("got %s, want a rejection saying the request cannot be decoded", out)
	}
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		settings    string
		wantValid   bool
		wantMessage string
	}{
		{settings: `{}`, wantValid: true},
		{settings: `null`, wantValid: true},
		{settings: ``, wantValid: true},
		{settings: `{"capability": "BPF"}`, wantMessage: `unknown field(s): "capability"`},
		{settings: `[1]`, wantMessage: "settings must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.settings, func(t *testing.T) {
			out, err := validateSettings([]byte(tt.settings))
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
			if resp.Valid != tt.wantValid {
				t.Fatalf("valid = %v, want %v (%s)", resp.Valid, tt.wantValid, out)
			}
			if tt.wantMessage != "" && (resp.Message == nil || !strings.Contains(*resp.Message, tt.wantMessage)) {
				t.Errorf("message = %s, want it to contain %q", out, tt.wantMessage)
			}
		})
	}
}

// FuzzValidate checks that any payload gives a JSON answer (never a panic: in Wasm a panic is a
// trap that costs the host an instance).
func FuzzValidate(f *testing.F) {
	for _, name := range []string{"pod-adds-capabilities.json", "pod-ephemeral-container.json", "pod-delete.json"} {
		request, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(`{"request": ` + string(request) + `, "settings": {}}`))
	}
	f.Add([]byte(`{"request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [1, {"securityContext": {"capabilities": {"add": "x", "drop": 3}}}]}}}}`))
	f.Add([]byte(`{"request": {"kind": {"kind": "Pod"}, "object": {"spec": {"containers": [{"securityContext": {"capabilities": {"add": ["A"], "drop": "BPF"}}}]}}}}`))
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
