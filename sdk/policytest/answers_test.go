//go:build !wasip1

package policytest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/guest"
)

func call(namespace, operation, payload string) (string, error) {
	out, err := guest.HostCall("kubewarden", namespace, operation, []byte(payload))
	return string(out), err
}

func TestAnswerAndFail(t *testing.T) {
	h := NewHost(t)
	must(t, h.Answer("kubernetes", "get_resource",
		map[string]any{"api_version": "v1", "kind": "Namespace", "name": "a", "disable_cache": false, "field_masks": []string{"b", "a"}},
		json.RawMessage(`{"kind":"Namespace"}`)))
	must(t, h.Fail("kubernetes", "get_resource", json.RawMessage(`{"api_version":"v1","kind":"Namespace","name":"gone","disable_cache":false}`),
		"Cannot find v1/Namespace named 'gone' inside of namespace 'None'"))
	must(t, h.Answer("kubernetes", "list_resources_all", json.RawMessage(`{"api_version":"v1","kind":"Pod"}`), map[string]any{"items": []any{}}))
	must(t, h.Answer("kubernetes", "can_i", json.RawMessage(`{"subject_access_review":{"user":"u","resource_attributes":{"verb":"get","resource":"pods"}},"disable_cache":false}`), json.RawMessage(`{"allowed":true}`)))
	must(t, h.Answer("oci", "v1/manifest_digest", "busybox", map[string]string{"digest": "sha256:1"}))

	tests := []struct {
		name, namespace, operation, payload string
		want, wantErr                       string
	}{
		{name: "null, absent and mask order do not matter", namespace: "kubernetes", operation: "get_resource",
			payload: `{"api_version":"v1","kind":"Namespace","name":"a","namespace":null,"disable_cache":false,"field_masks":["a","b"]}`, want: `{"kind":"Namespace"}`},
		{name: "a canned failure has the host's prefix", namespace: "kubernetes", operation: "get_resource",
			payload: `{"api_version":"v1","kind":"Namespace","name":"gone","disable_cache":false}`,
			wantErr: "Callback evaluation failure: Cannot find v1/Namespace named 'gone' inside of namespace 'None'"},
		{name: "a list's disable_cache false may be sent", namespace: "kubernetes", operation: "list_resources_all",
			payload: `{"api_version":"v1","kind":"Pod","disable_cache":false}`, want: `{"items":[]}`},
		{name: "policy-sdk-go's resourceAttributes", namespace: "kubernetes", operation: "can_i",
			payload: `{"subject_access_review":{"user":"u","resourceAttributes":{"verb":"get","resource":"pods"}},"disable_cache":false}`, want: `{"allowed":true}`},
		{name: "a JSON string payload", namespace: "oci", operation: "v1/manifest_digest", payload: `"busybox"`, want: `{"digest":"sha256:1"}`},
		{name: "a request nobody canned names it and the canned ones", namespace: "kubernetes", operation: "get_resource",
			payload: `{"api_version":"v1","kind":"Namespace","name":"other","disable_cache":false}`,
			wantErr: `no canned answer for kubernetes/get_resource {"api_version":"v1","kind":"Namespace","name":"other","disable_cache":false} (canned: `},
		{name: "a capability nothing answers", namespace: "net", operation: "v1/dns_lookup_host", payload: `"x"`,
			wantErr: "host call net/v1/dns_lookup_host is not handled by this test"},
		{name: "a payload that is not JSON", namespace: "oci", operation: "v1/manifest_digest", payload: `busybox`,
			wantErr: "invalid host call payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := call(tt.namespace, tt.operation, tt.payload)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	if n := len(h.Calls()); n != len(tests) {
		t.Errorf("Calls() has %d calls, want %d", n, len(tests))
	}
	if err := h.Answer("oci", "v1/manifest_digest", json.RawMessage(`{`), "x"); err == nil {
		t.Error("a canned request that is not JSON was accepted")
	}
}

func TestReplaySession(t *testing.T) {
	h := NewHost(t)
	must(t, h.ReplaySession(filepath.Join("testdata", "session.yml")))
	if got, err := call("kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"team-a","disable_cache":false,"field_masks":["metadata.labels"]}`); err != nil || !strings.Contains(got, "cc-42") {
		t.Fatalf("get_resource: %s, %v", got, err)
	}
	if got, err := call("kubernetes", "can_i", `{"subject_access_review":{"user":"alice","resource_attributes":{"group":"","namespace":"shop","verb":"create","resource":"pods"}},"disable_cache":false}`); err != nil || got != `{"allowed":true}` {
		t.Fatalf("can_i: %s, %v", got, err)
	}
	if _, err := call("net", "v1/dns_lookup_host", `"gone.example.com"`); err == nil || err.Error() != "host error: Callback evaluation failure: failed to lookup address information: Name or service not known" {
		t.Fatalf("dns: %v", err)
	}
	if h.SessionRemaining() != 0 {
		t.Errorf("SessionRemaining = %d", h.SessionRemaining())
	}
	if _, err := call("net", "v1/dns_lookup_host", `"x"`); err == nil || !strings.Contains(err.Error(), "the list of recorded responses is empty") {
		t.Fatalf("past the end: %v", err)
	}

	// A different request is refused, naming the entry, and consumed.
	h2 := NewHost(t)
	must(t, h2.ReplaySession(filepath.Join("testdata", "session.yml")))
	_, err := call("kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"team-b","disable_cache":false}`)
	if err == nil || !strings.Contains(err.Error(), "Replay error: unexpected request. Was expecting !KubernetesGetResource") ||
		!strings.Contains(err.Error(), "entry 1, line 2") {
		t.Fatalf("mismatch: %v", err)
	}
	if h2.SessionRemaining() != 2 {
		t.Errorf("SessionRemaining after a mismatch = %d, want 2", h2.SessionRemaining())
	}
}

func TestReplaySessionBadFiles(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, src, wantErr string }{
		{"no tag", "- type: Exchange\n  request: |\n    api_version: v1\n  response: {type: Success, payload: '{}'}\n",
			"entry 1 (line 1): request: the request has no variant tag"},
		{"unknown tag", "- type: Exchange\n  request: '!Nope {}'\n  response: {type: Success, payload: '{}'}\n", "unknown request variant !Nope"},
		{"bad response", "- type: Exchange\n  request: '!DNSLookupHost {host: x}'\n  response: {type: Maybe}\n", `type "Maybe" is not Success or Error`},
		{"not a list", "a: 1\n", "not a list of exchanges"},
		{"not YAML", "- a: 'x\n", "unterminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "s.yml")
			writeFile(t, path, tt.src)
			err := NewHost(t).ReplaySession(path)
			if !errors.Is(err, ErrSession) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want ErrSession naming %s and %q", err, path, tt.wantErr)
			}
		})
	}
	if err := NewHost(t).ReplaySession(filepath.Join(dir, "missing.yml")); !errors.Is(err, ErrSession) {
		t.Fatalf("missing file: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
