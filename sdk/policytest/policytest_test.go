//go:build !wasip1

package policytest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

func TestBuildValidationRequestFromFixture(t *testing.T) {
	tests := []struct {
		name, path  string
		settings    any
		wantUID     string
		wantOp      string
		wantSetting string
		wantErr     string
	}{
		{name: "AdmissionRequest", path: "testdata/pod-request.json", settings: map[string]any{"a": 1},
			wantUID: "1299d386-525b-4032-98ae-1949f69f9cfc", wantOp: "CREATE", wantSetting: `{"a":1}`},
		{name: "AdmissionReview", path: "testdata/pod-review.json",
			wantUID: "b5f3b1f0-8c1e-4c53-9d1d-3c2a0c1f6b11", wantOp: "UPDATE", wantSetting: `{}`},
		{name: "missing file", path: "testdata/nope.json", wantErr: "testdata/nope.json: no such file"},
		{name: "not a request", path: "testdata/not-a-request.json", wantErr: `testdata/not-a-request.json: not an AdmissionRequest (no "uid")`},
		{name: "truncated", path: "testdata/truncated.json", wantErr: "testdata/truncated.json: not an AdmissionRequest or AdmissionReview: unexpected end of JSON input"},
		{name: "settings that do not encode", path: "testdata/pod-request.json", settings: func() {}, wantErr: "encoding the settings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, err := BuildValidationRequestFromFixture(tt.path, tt.settings)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var vr protocol.ValidationRequest
			if err := json.Unmarshal(payload, &vr); err != nil {
				t.Fatal(err)
			}
			var req protocol.KubernetesAdmissionRequest
			if err := json.Unmarshal(vr.Request, &req); err != nil {
				t.Fatal(err)
			}
			if req.UID != tt.wantUID || req.Operation != tt.wantOp || len(req.Object) == 0 {
				t.Fatalf("request %+v", req)
			}
			if string(vr.Settings) != tt.wantSetting {
				t.Fatalf("settings %s, want %s", vr.Settings, tt.wantSetting)
			}
		})
	}
}

func TestParseAdmissionRequest(t *testing.T) {
	for _, tt := range []struct{ name, in, wantErr string }{
		{"review without request", `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`, `AdmissionReview without a "request"`},
		{"review with null request", `{"kind":"AdmissionReview","request":null}`, `AdmissionReview without a "request"`},
		{"array", `[1]`, "not an AdmissionRequest or AdmissionReview"},
		{"request with a bad field", `{"uid":"x","operation":7}`, "AdmissionRequest: json: cannot unmarshal number"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAdmissionRequest([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
	// A review given without its kind is still recognised by its "request".
	req, err := ParseAdmissionRequest([]byte(`{"request":{"uid":"u"}}`))
	if err != nil || req.UID != "u" {
		t.Fatalf("%+v, %v", req, err)
	}
}

func TestBuildValidationRequestForObject(t *testing.T) {
	obj := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "prod"}}
	payload, err := BuildValidationRequestForObject(obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	var vr struct {
		Request  protocol.KubernetesAdmissionRequest
		Settings json.RawMessage
	}
	if err := json.Unmarshal(payload, &vr); err != nil {
		t.Fatal(err)
	}
	r := vr.Request
	if r.Kind != (protocol.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}) || r.Name != "web" || r.Namespace != "prod" || r.Operation != "CREATE" || string(vr.Settings) != "{}" {
		t.Fatalf("request %+v settings %s", r, vr.Settings)
	}
	if _, err := BuildValidationRequestForObject([]int{1}, nil); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("array object: %v", err)
	}
}

func TestDecodeResponses(t *testing.T) {
	if _, err := DecodeValidationResponse([]byte(`{"accepted":true,"mesage":"typo"}`)); err == nil || !strings.Contains(err.Error(), `unknown field "mesage"`) {
		t.Fatalf("misspelt field: %v", err)
	}
	if _, err := DecodeValidationResponse([]byte(`{"accepted":true} {}`)); err == nil {
		t.Fatal("trailing data accepted")
	}
	r, err := DecodeValidationResponse([]byte(`{"accepted":false,"message":"m","code":400,"warnings":["w"],"audit_annotations":{"a":"b"}}`))
	if err != nil || r.Accepted || *r.Message != "m" || *r.Code != 400 || r.Warnings[0] != "w" || r.AuditAnnotations["a"] != "b" {
		t.Fatalf("%+v, %v", r, err)
	}
	s, err := DecodeSettingsValidationResponse([]byte(`{"valid":false,"message":"bad"}`))
	if err != nil || s.Valid || *s.Message != "bad" {
		t.Fatalf("%+v, %v", s, err)
	}
	if _, err := DecodeSettingsValidationResponse([]byte(`not json`)); err == nil || !strings.Contains(err.Error(), "SettingsValidationResponse") {
		t.Fatalf("not json: %v", err)
	}
}

func TestValidateAndHost(t *testing.T) {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate": func(p []byte) ([]byte, error) {
			if _, err := guest.HostCall("kubewarden", "tracing", "log", []byte(`{"level":"INFO","message":"validating","uid":"1"}`)); err != nil {
				return nil, err
			}
			ips, err := guest.HostCall("kubewarden", "net", "v1/dns_lookup_host", []byte(`"registry.local"`))
			if err != nil {
				return nil, err
			}
			return []byte(`{"accepted":true,"warnings":[` + string(ips) + `]}`), nil
		},
		"validate_settings": func(p []byte) ([]byte, error) {
			if string(p) != `{}` && string(p) != `{"x":1}` {
				return nil, errors.New("unexpected settings " + string(p))
			}
			return []byte(`{"valid":true}`), nil
		},
	})
	t.Cleanup(func() { guest.RegisterFunctions(map[string]guest.Function{"validate": nil, "validate_settings": nil}) })

	h := NewHost(t)
	if _, err := Validate([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), "net/v1/dns_lookup_host is not handled") {
		t.Fatalf("unhandled host call: %v", err)
	}
	h.Handle("net", "v1/dns_lookup_host", func([]byte) ([]byte, error) { return []byte(`"10.0.0.1"`), nil })
	r, err := Validate([]byte(`{}`))
	if err != nil || !r.Accepted || len(r.Warnings) != 1 || r.Warnings[0] != "10.0.0.1" {
		t.Fatalf("Validate = %+v, %v", r, err)
	}
	logs := h.Logs()
	if len(logs) != 2 || logs[0].Level != "info" || logs[0].Message != "validating" || logs[0].Fields["uid"] != "1" {
		t.Fatalf("logs %+v", logs)
	}
	for _, s := range []any{nil, json.RawMessage(`{"x":1}`), map[string]int{"x": 1}} {
		if sr, err := ValidateSettings(s); err != nil || !sr.Valid {
			t.Fatalf("ValidateSettings(%v) = %+v, %v", s, sr, err)
		}
	}
	if _, err := ValidateSettings(map[string]int{"y": 2}); err == nil || !strings.Contains(err.Error(), `validate_settings: unexpected settings {"y":2}`) {
		t.Fatalf("guest error: %v", err)
	}
}

func TestHostRejectsBadLogRecords(t *testing.T) {
	NewHost(t)
	for _, rec := range []string{`not json`, `{"message":"no level"}`, `{"level":"warn","message":"onelog's warn"}`} {
		if _, err := guest.HostCall("kubewarden", "tracing", "log", []byte(rec)); err == nil {
			t.Errorf("log record %s accepted", rec)
		}
	}
	if _, err := guest.HostCall("other", "tracing", "log", []byte(`{}`)); err == nil {
		t.Error("unknown binding accepted")
	}
}
