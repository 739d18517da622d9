package admission

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const podRequest = `{"uid":"u1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
"operation":"CREATE","namespace":"ns","name":"p","userInfo":{"username":"alice"},"object":{"metadata":{"name":"p"}}}`

func TestParseReview(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantUID string
		wantErr error
		errText string
	}{
		{"bare request", podRequest, "u1", nil, ""},
		{"review", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + podRequest + `}`, "u1", nil, ""},
		{"review v1beta1", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":` + podRequest + `}`, "u1", nil, ""},
		{"not json", `{"uid": `, "", ErrBadJSON, "line 1, column"},
		{"empty", ``, "", ErrBadJSON, "empty"},
		{"array", `[1,2]`, "", ErrNotAdmission, "array"},
		{"other kind", `{"apiVersion":"v1","kind":"Pod","request":{}}`, "", ErrNotAdmission, `kind is "Pod"`},
		{"review without request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "", ErrNotAdmission, "no request"},
		{"missing fields", `{"foo":"bar"}`, "", ErrNotAdmission, "missing uid, operation, kind.kind"},
		{"bad operation", `{"uid":"x","operation":"PATCH","kind":{"kind":"Pod"}}`, "", ErrNotAdmission, `"PATCH"`},
		{"wrong field type", `{"uid":5,"operation":"CREATE","kind":{"kind":"Pod"}}`, "", ErrNotAdmission, "uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseReview([]byte(tt.in))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("want %v containing %q, got %v", tt.wantErr, tt.errText, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.UID != tt.wantUID || r.Operation != "CREATE" || r.Kind.Kind != "Pod" || string(r.Object) != `{"metadata":{"name":"p"}}` {
				t.Fatalf("parsed %+v", r)
			}
			if !json.Valid(r.Raw) {
				t.Fatalf("raw request is not JSON: %s", r.Raw)
			}
		})
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	err := CheckJSON([]byte("{\n  \"a\": 1,\n  \"b\": ]\n}"))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("want the error on line 3, got %v", err)
	}
}

func TestResponseFieldOrder(t *testing.T) {
	// kwctl prints uid, allowed, patchType, patch, status, auditAnnotations, warnings; scripts grep it.
	r := FromVerdict("u", Verdict{Accepted: true, Patch: []byte(`[]`), Warnings: []string{"w"}, AuditAnnotations: map[string]string{"k": "v"}})
	b, _ := r.MarshalCompact()
	want := `{"uid":"u","allowed":true,"patchType":"JSONPatch","patch":"W10=","auditAnnotations":{"k":"v"},"warnings":["w"]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	r = FromVerdict("u", Verdict{Accepted: false, Message: "no", Code: 403})
	b, _ = r.MarshalCompact()
	if want := `{"uid":"u","allowed":false,"status":{"message":"no","code":403}}`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	r = FromVerdict("u", Verdict{Accepted: true})
	b, _ = r.MarshalCompact()
	if want := `{"uid":"u","allowed":true}`; string(b) != want {
		t.Fatalf("unmutated accept must have no patch fields: %s", b)
	}
}

func FuzzParseReview(f *testing.F) {
	f.Add([]byte(podRequest))
	f.Add([]byte(`{"kind":"AdmissionReview","request":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReview(b)
		if err == nil && (r.UID == "" || r.Operation == "") {
			t.Fatalf("accepted a request without uid or operation: %s", b)
		}
	})
}
