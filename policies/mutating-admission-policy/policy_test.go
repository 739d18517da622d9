//go:build !wasip1

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
	"sigs.k8s.io/yaml"
)

func readJSON(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestValidateSettings(t *testing.T) {
	out, err := guest.Invoke("validate_settings", readJSON(t, "testdata/sidecar-settings.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.SettingsValidationResponse
	if err := json.Unmarshal(out, &r); err != nil || !r.Valid {
		t.Fatalf("%s %v", out, err)
	}
	bad := strings.Replace(string(readJSON(t, "testdata/sidecar-settings.yml")), `\"mesh-proxy\")`, `\"mesh-proxy\"`, 1)
	out, err = guest.Invoke("validate_settings", []byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &r); err != nil || r.Valid || r.Message == nil ||
		!strings.Contains(*r.Message, "spec.matchConditions[0].expression: Invalid value") || !strings.Contains(*r.Message, "Syntax error") {
		t.Fatalf("%s %v", out, err)
	}
}

func TestValidate(t *testing.T) {
	settings := readJSON(t, "testdata/sidecar-settings.yml")
	call := func(request string) protocol.ValidationResponse {
		t.Helper()
		payload, _ := json.Marshal(protocol.ValidationRequest{Request: readJSON(t, request), Settings: settings})
		out, err := guest.Invoke("validate", payload)
		if err != nil {
			t.Fatal(err)
		}
		var r protocol.ValidationResponse
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := call("testdata/pod.json")
	if !r.Accepted || !strings.Contains(string(r.MutatedObject), `"name":"mesh-proxy"`) {
		t.Fatalf("%+v %s", r, r.MutatedObject)
	}
	r = call("testdata/pod-with-sidecar.json")
	if !r.Accepted || r.MutatedObject != nil {
		t.Fatalf("%+v", r)
	}
	// One compilation for all calls with the same settings.
	e1, _ := engineFor(settings)
	e2, _ := engineFor(settings)
	if e1 == nil || e1 != e2 {
		t.Fatal("settings compiled twice")
	}
	if _, err := guest.Invoke("validate", []byte(`{"request": 1, "settings": {}}`)); err == nil {
		t.Fatal("bad payload accepted")
	}
}

// TestValidateAuthorizer runs the documented authorizer example: the sidecar
// is injected unless RBAC (settings.rbac) or system:masters lets the
// requester bypass the mesh.
func TestValidateAuthorizer(t *testing.T) {
	settings := readJSON(t, "testdata/authz-settings.yml")
	for _, c := range []struct {
		request  string
		injected bool
	}{
		{"testdata/pod-by-developer.json", true},
		{"testdata/pod-by-mesh-operator.json", false}, // RoleBinding in default to the group mesh-operators
		{"testdata/pod.json", false},                  // kubernetes-admin is in system:masters
	} {
		payload, _ := json.Marshal(protocol.ValidationRequest{Request: readJSON(t, c.request), Settings: settings})
		out, err := guest.Invoke("validate", payload)
		if err != nil {
			t.Fatal(err)
		}
		var r protocol.ValidationResponse
		if err := json.Unmarshal(out, &r); err != nil || !r.Accepted {
			t.Fatalf("%s: %s %v", c.request, out, err)
		}
		if got := strings.Contains(string(r.MutatedObject), `"name":"mesh-proxy"`); got != c.injected {
			t.Errorf("%s: sidecar injected %v, want %v (%s)", c.request, got, c.injected, r.MutatedObject)
		}
	}
}

// TestEngineCacheEvicts fills the cache of compiled policies past
// maxCachedSettings, cycling through more distinct settings than it holds:
// every answer is the one of its own settings (the sidecar image of that
// settings), whether its engine was cached or compiled again after eviction.
func TestEngineCacheEvicts(t *testing.T) {
	base := string(readJSON(t, "testdata/sidecar-settings.yml"))
	if !strings.Contains(base, "mesh/proxy:v1.0.0") {
		t.Fatal("testdata/sidecar-settings.yml no longer names the image mesh/proxy:v1.0.0")
	}
	request := readJSON(t, "testdata/pod.json")
	n := maxCachedSettings + 3
	settingsOf := func(i int) []byte {
		return []byte(strings.ReplaceAll(base, "mesh/proxy:v1.0.0", fmt.Sprintf("mesh/proxy:v9.%d", i)))
	}
	first, err := engineFor(settingsOf(0))
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < n; i++ {
			payload, _ := json.Marshal(protocol.ValidationRequest{Request: request, Settings: settingsOf(i)})
			out, err := guest.Invoke("validate", payload)
			if err != nil {
				t.Fatal(err)
			}
			var r protocol.ValidationResponse
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`"image":"mesh/proxy:v9.%d"`, i); !r.Accepted || !strings.Contains(string(r.MutatedObject), want) {
				t.Fatalf("round %d, settings %d: want %s in %s", round, i, want, out)
			}
		}
	}
	compiled.Lock()
	held := compiled.lru.Len()
	compiled.Unlock()
	if held != maxCachedSettings {
		t.Fatalf("%d compiled policies cached, want %d", held, maxCachedSettings)
	}
	again, err := engineFor(settingsOf(0))
	if err != nil {
		t.Fatal(err)
	}
	if again == first {
		t.Fatal("the engine of settings 0 was not evicted by later settings")
	}
	if e2, _ := engineFor(settingsOf(0)); e2 != again {
		t.Fatal("settings compiled twice in a row")
	}
}
