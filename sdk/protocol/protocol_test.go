package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestValidationResponseJSON(t *testing.T) {
	tests := []struct {
		name string
		resp ValidationResponse
		want string
	}{
		{name: "accepted, optional fields omitted", resp: ValidationResponse{Accepted: true}, want: `{"accepted":true}`},
		{name: "rejected with message and code",
			resp: ValidationResponse{Message: ptr("no"), Code: ptr(uint16(403))},
			want: `{"accepted":false,"message":"no","code":403}`},
		{name: "empty message and zero code are kept when set",
			resp: ValidationResponse{Message: ptr(""), Code: ptr(uint16(0))},
			want: `{"accepted":false,"message":"","code":0}`},
		{name: "mutation, warnings, audit annotations",
			resp: ValidationResponse{Accepted: true, MutatedObject: json.RawMessage(`{"kind":"Pod"}`),
				AuditAnnotations: map[string]string{"b": "2", "a": "1"}, Warnings: []string{"w1", "w2"}},
			want: `{"accepted":true,"mutated_object":{"kind":"Pod"},"audit_annotations":{"a":"1","b":"2"},"warnings":["w1","w2"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("Marshal = %s, want %s", b, tt.want)
			}
			var back ValidationResponse
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tt.resp) {
				t.Fatalf("round trip = %+v, want %+v", back, tt.resp)
			}
		})
	}
}

func TestValidationResponseDecodeMissingFields(t *testing.T) {
	var r ValidationResponse
	if err := json.Unmarshal([]byte(`{"accepted":false}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Accepted || r.Message != nil || r.Code != nil || r.MutatedObject != nil || r.AuditAnnotations != nil || r.Warnings != nil {
		t.Fatalf("decoded %+v, want every optional field nil", r)
	}
	// A null mutated_object is how some guests say "no mutation".
	if err := json.Unmarshal([]byte(`{"accepted":true,"mutated_object":null}`), &r); err != nil {
		t.Fatal(err)
	}
	if string(r.MutatedObject) != "null" {
		t.Fatalf("mutated_object null decoded as %q; hosts must treat null as no mutation", r.MutatedObject)
	}
}

func TestSettingsValidationResponseJSON(t *testing.T) {
	for _, tt := range []struct {
		resp SettingsValidationResponse
		want string
	}{
		{SettingsValidationResponse{Valid: true}, `{"valid":true}`},
		{SettingsValidationResponse{Message: ptr("registries must not be empty")}, `{"valid":false,"message":"registries must not be empty"}`},
	} {
		b, err := json.Marshal(tt.resp)
		if err != nil || string(b) != tt.want {
			t.Fatalf("Marshal = %s, %v; want %s", b, err, tt.want)
		}
		var back SettingsValidationResponse
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, tt.resp) {
			t.Fatalf("round trip = %+v, %v", back, err)
		}
	}
}

func TestValidationRequestJSON(t *testing.T) {
	in := `{"request":{"uid":"1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{"username":"alice"},"object":{"kind":"Pod"}},"settings":{}}`
	var vr ValidationRequest
	if err := json.Unmarshal([]byte(in), &vr); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(vr)
	if err != nil || string(b) != in {
		t.Fatalf("round trip = %s, %v", b, err)
	}
	var req KubernetesAdmissionRequest
	if err := json.Unmarshal(vr.Request, &req); err != nil {
		t.Fatal(err)
	}
	if req.UID != "1" || req.Kind.Kind != "Pod" || req.Resource.Resource != "pods" || req.UserInfo.Username != "alice" || string(req.Object) != `{"kind":"Pod"}` {
		t.Fatalf("decoded %+v", req)
	}
	// Optional fields stay absent when re-encoded.
	b, err = json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"uid":"1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{"username":"alice"},"object":{"kind":"Pod"}}`
	if string(b) != want {
		t.Fatalf("Marshal = %s\nwant      %s", b, want)
	}
}

func TestKubernetesAdmissionRequestFull(t *testing.T) {
	req := KubernetesAdmissionRequest{
		UID: "u", Kind: GroupVersionKind{"apps", "v1", "Deployment"},
		Resource:    GroupVersionResource{"apps", "v1", "deployments"},
		SubResource: "scale", RequestKind: &GroupVersionKind{"apps", "v1beta1", "Deployment"},
		RequestResource:    &GroupVersionResource{"apps", "v1beta1", "deployments"},
		RequestSubResource: "scale", Name: "web", Namespace: "prod", Operation: "UPDATE",
		UserInfo:  UserInfo{Username: "bob", UID: "42", Groups: []string{"dev"}, Extra: map[string][]string{"k": {"v"}}},
		Object:    json.RawMessage(`{"a":1}`),
		OldObject: json.RawMessage(`{"a":0}`), DryRun: ptr(true), Options: json.RawMessage(`{"kind":"UpdateOptions"}`),
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back KubernetesAdmissionRequest
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, req) {
		t.Fatalf("round trip\n got %+v\nwant %+v", back, req)
	}
}
