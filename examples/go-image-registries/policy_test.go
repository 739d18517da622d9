package main

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/policytest"
)

func readSettings(t *testing.T, path string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidate(t *testing.T) {
	settings := readSettings(t, "testdata/settings.json")
	alwaysPull := readSettings(t, "testdata/settings-always-pull.json")
	tests := []struct {
		name         string
		fixture      string
		settings     any
		wantAccepted bool
		wantCode     uint16
		wantInMsg    []string
		wantWarnings []string
		wantMutated  bool
	}{
		{name: "allowed pod", fixture: "testdata/pod-allowed.json", settings: settings, wantAccepted: true},
		{name: "allowed pod, bare AdmissionRequest", fixture: "testdata/pod-allowed-request.json", settings: settings, wantAccepted: true},
		{name: "denied pod lists the offending images", fixture: "testdata/pod-denied.json", settings: settings, wantCode: 403,
			wantInMsg: []string{`container "miner": evil.example.com/miner:1`, `container "sidecar": ghcr.io/other/sidecar@sha256:`,
				"(allowed: docker.io, ghcr.io/acme, registry.k8s.io)"}},
		{name: "denied deployment", fixture: "testdata/deployment-denied.json", settings: settings, wantCode: 403,
			wantInMsg: []string{`container "api": quay.io/acme/api:3`}},
		{name: "latest tag warns", fixture: "testdata/pod-latest.json", settings: settings, wantAccepted: true,
			wantWarnings: []string{`container "app": image nginx uses the latest tag`, `container "tools": image docker.io/library/busybox:latest uses the latest tag`}},
		{name: "delete has no object", fixture: "testdata/pod-delete.json", settings: settings, wantAccepted: true},
		{name: "kind without a pod spec", fixture: "testdata/configmap.json", settings: settings, wantAccepted: true,
			wantWarnings: []string{"image-registries: kind ConfigMap has no Pod spec to check"}},
		{name: "always pull mutates", fixture: "testdata/pod-allowed.json", settings: alwaysPull, wantAccepted: true, wantMutated: true},
		{name: "always pull does not mutate a rejected pod", fixture: "testdata/pod-denied.json", settings: alwaysPull, wantCode: 403},
		{name: "invalid settings reach validate", fixture: "testdata/pod-allowed.json", settings: map[string]any{}, wantCode: 400,
			wantInMsg: []string{"invalid settings: setting allowedRegistries must list at least one registry"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := policytest.NewHost(t)
			payload, err := policytest.BuildValidationRequestFromFixture(tt.fixture, tt.settings)
			if err != nil {
				t.Fatal(err)
			}
			r, err := policytest.Validate(payload)
			if err != nil {
				t.Fatal(err)
			}
			if r.Accepted != tt.wantAccepted {
				t.Fatalf("accepted = %v, want %v (message %v)", r.Accepted, tt.wantAccepted, r.Message)
			}
			if tt.wantCode != 0 && (r.Code == nil || *r.Code != tt.wantCode) {
				t.Errorf("code = %v, want %d", r.Code, tt.wantCode)
			}
			for _, s := range tt.wantInMsg {
				if r.Message == nil || !strings.Contains(*r.Message, s) {
					t.Errorf("message %v does not contain %q", r.Message, s)
				}
			}
			if r.Accepted && r.Message != nil {
				t.Errorf("accepted with message %q", *r.Message)
			}
			if !reflect.DeepEqual(r.Warnings, tt.wantWarnings) {
				t.Errorf("warnings = %q, want %q", r.Warnings, tt.wantWarnings)
			}
			if (r.MutatedObject != nil) != tt.wantMutated {
				t.Errorf("mutated_object = %s, want mutated %v", r.MutatedObject, tt.wantMutated)
			}
			if !r.Accepted && tt.wantCode == 403 && r.AuditAnnotations[RejectedImagesAnnotation] == "" {
				t.Errorf("no %s audit annotation: %v", RejectedImagesAnnotation, r.AuditAnnotations)
			}
			logs := h.Logs()
			if tt.wantCode == 403 {
				if len(logs) != 1 || logs[0].Level != "info" || logs[0].Message != "rejected images" || logs[0].Fields["uid"] == "" {
					t.Errorf("logs = %+v, want one info record about the rejection", logs)
				}
			} else if len(logs) != 0 {
				t.Errorf("unexpected logs at the info level: %+v", logs)
			}
		})
	}
}

// The mutation changes imagePullPolicy and nothing else, numbers included.
func TestValidateMutationKeepsTheRest(t *testing.T) {
	policytest.NewHost(t)
	payload, err := policytest.BuildValidationRequestFromFixture("testdata/pod-allowed.json", readSettings(t, "testdata/settings-always-pull.json"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := policytest.Validate(payload)
	if err != nil || r.MutatedObject == nil {
		t.Fatalf("Validate = %+v, %v", r, err)
	}
	req, err := policytest.ParseAdmissionRequest(mustRead(t, "testdata/pod-allowed.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(req.Object, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r.MutatedObject, &got); err != nil {
		t.Fatal(err)
	}
	spec := want["spec"].(map[string]any)
	for _, list := range []string{"containers", "initContainers"} {
		for _, c := range spec[list].([]any) {
			c.(map[string]any)["imagePullPolicy"] = "Always"
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mutated object\n got %s\nwant %v", r.MutatedObject, want)
	}
	if !strings.Contains(string(r.MutatedObject), `"terminationGracePeriodSeconds":30`) {
		t.Errorf("integers not kept exact: %s", r.MutatedObject)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		name     string
		settings string
		wantErr  string
	}{
		{"valid", `{"allowedRegistries":["docker.io","ghcr.io/acme","localhost:5000"]}`, ""},
		{"valid with pull", `{"allowedRegistries":["docker.io"],"alwaysPullImages":true}`, ""},
		{"missing", `{}`, "setting allowedRegistries must list at least one registry"},
		{"null", `null`, "setting allowedRegistries must list at least one registry"},
		{"empty list", `{"allowedRegistries":[]}`, "setting allowedRegistries must list at least one registry"},
		{"not a list", `{"allowedRegistries":"docker.io"}`, "setting allowedRegistries must be a list of strings, not a JSON string"},
		{"not strings", `{"allowedRegistries":[1]}`, "must be a list of strings, not a JSON number"},
		{"bool wrong", `{"allowedRegistries":["docker.io"],"alwaysPullImages":"yes"}`, "setting alwaysPullImages must be true or false, not a JSON string"},
		{"typo", `{"allowedRegistry":["docker.io"]}`, `unknown setting "allowedRegistry" (known: allowedRegistries, alwaysPullImages)`},
		{"scheme", `{"allowedRegistries":["https://ghcr.io"]}`, `setting allowedRegistries[0] "https://ghcr.io": must not have a scheme`},
		{"empty entry", `{"allowedRegistries":["docker.io",""]}`, `allowedRegistries[1] "": is empty`},
		{"tag", `{"allowedRegistries":["ghcr.io/acme/web:1"]}`, "must not have a tag"},
		{"digest", `{"allowedRegistries":["ghcr.io/acme@sha256:00"]}`, "without spaces or a digest"},
		{"trailing slash", `{"allowedRegistries":["ghcr.io/"]}`, "has an empty path component"},
		{"not an object", `[1]`, "settings are not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policytest.ValidateSettings(json.RawMessage(tt.settings))
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantErr == "" {
				if !r.Valid {
					t.Fatalf("rejected: %v", *r.Message)
				}
				return
			}
			if r.Valid || r.Message == nil || !strings.Contains(*r.Message, tt.wantErr) {
				t.Fatalf("valid=%v message=%v, want %q", r.Valid, r.Message, tt.wantErr)
			}
		})
	}
	if r, err := policytest.ValidateSettings(readSettings(t, "testdata/settings-invalid.json")); err != nil || r.Valid {
		t.Fatalf("testdata/settings-invalid.json accepted: %+v, %v", r, err)
	}
}

func TestParseImage(t *testing.T) {
	tests := []struct {
		image string
		want  imageRef
		err   string
	}{
		{image: "nginx", want: imageRef{"docker.io", "library/nginx", "latest", ""}},
		{image: "nginx:1.27", want: imageRef{"docker.io", "library/nginx", "1.27", ""}},
		{image: "acme/web", want: imageRef{"docker.io", "acme/web", "latest", ""}},
		{image: "index.docker.io/acme/web:1", want: imageRef{"docker.io", "acme/web", "1", ""}},
		{image: "GHCR.io/acme/web:2", want: imageRef{"ghcr.io", "acme/web", "2", ""}},
		{image: "localhost/app", want: imageRef{"localhost", "app", "latest", ""}},
		{image: "localhost:5000/app:v1", want: imageRef{"localhost:5000", "app", "v1", ""}},
		{image: "registry.local:5000/a/b/c@sha256:ab", want: imageRef{"registry.local:5000", "a/b/c", "", "sha256:ab"}},
		{image: "quay.io/x:1@sha256:ab", want: imageRef{"quay.io", "x", "1", "sha256:ab"}},
		{image: "", err: "no image"},
		{image: "https://ghcr.io/x", err: "not a valid reference"},
		{image: "a b", err: "not a valid reference"},
		{image: "ghcr.io/", err: "has no repository"},
	}
	for _, tt := range tests {
		got, err := parseImage(tt.image)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseImage(%q) error %v, want %q", tt.image, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseImage(%q) = %+v, %v; want %+v", tt.image, got, err, tt.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	regs := []string{"docker.io", "ghcr.io/acme", "localhost:5000"}
	for image, want := range map[string]bool{
		"nginx": true, "ghcr.io/acme/web": true, "ghcr.io/acme": false, "ghcr.io/acmecorp/web": false,
		"ghcr.io/other/x": false, "localhost:5000/x": true, "localhost/x": false, "docker.io.evil.com/x": false,
	} {
		ref, err := parseImage(image)
		if err != nil {
			t.Fatal(err)
		}
		if got := allowed(ref, regs); got != want {
			t.Errorf("allowed(%q) = %v, want %v", image, got, want)
		}
	}
}

func FuzzParseImage(f *testing.F) {
	for _, s := range []string{"nginx", "ghcr.io/a/b:1@sha256:x", "localhost:5000/a", ":", "@", "/", "a/:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		ref, err := parseImage(image)
		if err == nil && (ref.registry == "" || ref.repository == "") {
			t.Fatalf("parseImage(%q) = %+v without an error", image, ref)
		}
	})
}

func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{`{}`, `{"allowedRegistries":["docker.io"]}`, `null`, `[`, `{"allowedRegistries":[""]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := parseSettings(raw)
		if err == nil && len(s.AllowedRegistries) == 0 {
			t.Fatalf("parseSettings(%q) accepted no registries", raw)
		}
	})
}

func BenchmarkValidate(b *testing.B) {
	payload, err := policytest.BuildValidationRequestFromFixture("testdata/pod-allowed.json", mustReadB(b, "testdata/settings.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := validate(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func mustReadB(b *testing.B, path string) json.RawMessage {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}
