//go:build !wasip1

package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/policytest"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// TestValidateFromCluster is the standard-Go module's test of the same name
// (../cluster_test.go) on this module's guest, natively: ../testdata/
// cluster-settings.yml (fromCluster: true) with the kubernetes host calls
// answered as the host would answer them (the Namespace and the ConfigMap
// parameter through get_resource, the ConfigMap's scope through the host's
// "is namespaced" error, the bypass check through can_i), each answer
// given for exactly the request the standard-Go guest makes.
func TestValidateFromCluster(t *testing.T) {
	settings := readJSON(t, "../testdata/cluster-settings.yml")
	nsGet := func(name string) capabilities.GetResourceRequest {
		return capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: name}
	}
	canI := func(user string, groups ...string) capabilities.CanIRequest {
		return capabilities.CanIRequest{SubjectAccessReview: capabilities.SubjectAccessReview{
			User: user, Groups: groups,
			ResourceAttributes: capabilities.ResourceAttributes{Namespace: "default", Verb: "bypass", Group: "mesh.example.com", Version: "*", Resource: "sidecars"},
		}}
	}
	host := func(t *testing.T, configMap bool, nsLabels string) *policytest.Host {
		h := policytest.NewHost(t)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(h.Answer("kubernetes", "get_resource", nsGet("default"),
			json.RawMessage(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default","labels":{`+nsLabels+`}}}`)))
		must(h.Fail("kubernetes", "get_resource", capabilities.GetResourceRequest{APIVersion: "v1", Kind: "ConfigMap", Name: scopeProbeName},
			"Resource v1/ConfigMap is namespaced, but no namespace was provided"))
		cm := capabilities.GetResourceRequest{APIVersion: "v1", Kind: "ConfigMap", Name: "mesh-config", Namespace: "default"}
		if configMap {
			must(h.Answer("kubernetes", "get_resource", cm,
				json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mesh-config","namespace":"default"},"data":{"image":"mesh/proxy:1.2"}}`)))
		} else {
			must(h.Fail("kubernetes", "get_resource", cm, "Cannot find v1/ConfigMap named 'mesh-config' inside of namespace 'Some(\"default\")'"))
		}
		must(h.Answer("kubernetes", "can_i", canI("dev", "developers", "system:authenticated"), map[string]any{"allowed": false}))
		must(h.Answer("kubernetes", "can_i", canI("olga", "mesh-operators", "system:authenticated"), map[string]any{"allowed": true, "reason": "RBAC: allowed by RoleBinding"}))
		return h
	}
	validate := func(t *testing.T, request string) protocol.ValidationResponse {
		t.Helper()
		payload, _ := json.Marshal(protocol.ValidationRequest{Request: readJSON(t, request), Settings: settings})
		out, err := guest.Invoke("validate", payload)
		if err != nil {
			t.Fatal(err)
		}
		var r protocol.ValidationResponse
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		return r
	}
	labels := `"mesh":"enabled","team":"payments"`

	t.Run("injected with the param's image and the namespace's team", func(t *testing.T) {
		h := host(t, true, labels)
		r := validate(t, "../testdata/pod-by-developer.json")
		obj := string(r.MutatedObject)
		if !r.Accepted || !strings.Contains(obj, `"image":"mesh/proxy:1.2"`) || !strings.Contains(obj, `"team":"payments"`) {
			t.Fatalf("%+v %s", r, obj)
		}
		var ops []string
		for _, c := range h.Calls() {
			ops = append(ops, c.Operation)
		}
		if len(ops) == 0 {
			t.Fatal("no host calls")
		}
	})
	t.Run("the cluster's RBAC lets the requester bypass", func(t *testing.T) {
		h := host(t, true, labels)
		if r := validate(t, "../testdata/pod-by-mesh-operator.json"); !r.Accepted || r.MutatedObject != nil {
			for _, c := range h.Calls() {
				t.Logf("%s %s", c.Operation, c.Payload)
			}
			t.Fatalf("%+v %s", r, r.MutatedObject)
		}
	})
	t.Run("namespace not selected", func(t *testing.T) {
		host(t, true, `"team":"payments"`)
		if r := validate(t, "../testdata/pod-by-developer.json"); !r.Accepted || r.MutatedObject != nil {
			t.Fatalf("%+v %s", r, r.MutatedObject)
		}
	})
	t.Run("param missing: Deny", func(t *testing.T) {
		host(t, false, labels)
		r := validate(t, "../testdata/pod-by-developer.json")
		if r.Accepted || r.Message == nil || !strings.Contains(*r.Message, "no params found for policy binding with `Deny` parameterNotFoundAction") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("kind not declared", func(t *testing.T) {
		h := policytest.NewHost(t)
		if err := h.Fail("kubernetes", "get_resource", nsGet("default"), "Policy has not been granted access to Kubernetes v1/Namespace resources. The violation has been reported."); err != nil {
			t.Fatal(err)
		}
		r := validate(t, "../testdata/pod-by-developer.json")
		if r.Accepted || r.Message == nil || !strings.Contains(*r.Message, "Policy has not been granted access to Kubernetes v1/Namespace resources") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("settings with fromCluster and params", func(t *testing.T) {
		s := strings.Replace(string(settings), `"fromCluster":true`, `"fromCluster":true,"params":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}]`, 1)
		out, err := guest.Invoke("validate_settings", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		var r protocol.SettingsValidationResponse
		if err := json.Unmarshal(out, &r); err != nil || r.Valid || r.Message == nil || !strings.Contains(*r.Message, "remove params") {
			t.Fatalf("%s %v", out, err)
		}
	})
}

func readJSON(t testing.TB, path string) []byte {
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
