//go:build !wasip1

package policytest_test

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
	"github.com/tollgate-dev/tollgate/sdk/policytest"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// registerPolicy registers a tiny policy that rejects objects in the
// namespace named by its settings. A real policy does this in init().
func registerPolicy() {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate": func(payload []byte) ([]byte, error) {
			var s struct {
				Denied string `json:"deniedNamespace"`
			}
			req, err := kubewarden.ParseValidationRequest(payload, &s)
			if err != nil {
				return kubewarden.RejectRequest(kubewarden.Message(err.Error()), 400)
			}
			kubewarden.NewLogger(nil).Info("validating", "namespace", req.Namespace)
			if req.Namespace == s.Denied {
				return kubewarden.RejectRequest(kubewarden.Message("namespace "+req.Namespace+" is denied"), 403)
			}
			return kubewarden.AcceptRequest()
		},
		"validate_settings": func(payload []byte) ([]byte, error) {
			var s struct {
				Denied string `json:"deniedNamespace"`
			}
			if err := kubewarden.ParseSettings(payload, &s); err != nil || s.Denied == "" {
				return kubewarden.RejectSettings("deniedNamespace must be a non-empty string")
			}
			return kubewarden.AcceptSettings()
		},
	})
}

// cleanups stands in for the *testing.T that a test passes to NewHost.
type cleanups []func()

func (c *cleanups) Cleanup(f func()) { *c = append(*c, f) }
func (c *cleanups) run() {
	for _, f := range *c {
		f()
	}
}

func ExampleBuildValidationRequestFromFixture() {
	payload, err := policytest.BuildValidationRequestFromFixture("testdata/pod-review.json", map[string]string{"deniedNamespace": "prod"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var vr protocol.ValidationRequest
	_ = json.Unmarshal(payload, &vr)
	fmt.Println(string(vr.Settings))

	_, err = policytest.BuildValidationRequestFromFixture("testdata/not-a-request.json", nil)
	fmt.Println(err)
	// Output:
	// {"deniedNamespace":"prod"}
	// policytest: testdata/not-a-request.json: not an AdmissionRequest (no "uid") or AdmissionReview (no "request")
}

func ExampleParseAdmissionRequest() {
	req, err := policytest.ParseAdmissionRequest([]byte(`{"kind":"AdmissionReview","request":{"uid":"7","operation":"DELETE"}}`))
	fmt.Println(req.UID, req.Operation, err)
	// Output: 7 DELETE <nil>
}

func ExampleBuildValidationRequest() {
	req := protocol.KubernetesAdmissionRequest{UID: "1", Operation: "CREATE", Namespace: "dev", Object: json.RawMessage(`{}`)}
	payload, _ := policytest.BuildValidationRequest(req, nil)
	fmt.Println(string(payload))
	// Output: {"request":{"uid":"1","kind":{"group":"","version":"","kind":""},"resource":{"group":"","version":"","resource":""},"namespace":"dev","operation":"CREATE","userInfo":{},"object":{}},"settings":{}}
}

func ExampleBuildValidationRequestForObject() {
	registerPolicy()
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "a", "namespace": "prod"}}
	payload, _ := policytest.BuildValidationRequestForObject(pod, map[string]string{"deniedNamespace": "prod"})
	r, _ := policytest.Validate(payload)
	fmt.Println(r.Accepted, *r.Message, *r.Code)
	// Output: false namespace prod is denied 403
}

func ExampleValidate() {
	registerPolicy()
	var c cleanups
	defer c.run()
	policytest.NewHost(&c) // answers the policy's log calls

	payload, _ := policytest.BuildValidationRequestFromFixture("testdata/pod-request.json", map[string]string{"deniedNamespace": "prod"})
	r, err := policytest.Validate(payload)
	fmt.Println(r.Accepted, err)
	// Output: true <nil>
}

func ExampleValidateSettings() {
	registerPolicy()
	r, _ := policytest.ValidateSettings(map[string]string{"deniedNamespace": ""})
	fmt.Println(r.Valid, *r.Message)
	r, _ = policytest.ValidateSettings(json.RawMessage(`{"deniedNamespace":"prod"}`))
	fmt.Println(r.Valid)
	// Output:
	// false deniedNamespace must be a non-empty string
	// true
}

func ExampleDecodeValidationResponse() {
	r, err := policytest.DecodeValidationResponse([]byte(`{"accepted":false,"message":"no","code":403}`))
	fmt.Println(r.Accepted, *r.Message, *r.Code, err)
	_, err = policytest.DecodeValidationResponse([]byte(`{"accepted":true,"warning":["typo"]}`))
	fmt.Println(err)
	// Output:
	// false no 403 <nil>
	// policytest: ValidationResponse: json: unknown field "warning"
}

func ExampleDecodeSettingsValidationResponse() {
	r, err := policytest.DecodeSettingsValidationResponse([]byte(`{"valid":true}`))
	fmt.Println(r.Valid, r.Message, err)
	// Output: true <nil> <nil>
}

func ExampleNewHost() {
	registerPolicy()
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)

	payload, _ := policytest.BuildValidationRequestFromFixture("testdata/pod-review.json", map[string]string{"deniedNamespace": "dev"})
	_, _ = policytest.Validate(payload)
	for _, rec := range h.Logs() {
		fmt.Println(rec.Level, rec.Message, rec.Fields)
	}
	// Output: info validating map[namespace:prod]
}

func ExampleHost_Handle() {
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)
	h.Handle("oci", "v1/manifest_digest", func(payload []byte) ([]byte, error) {
		return []byte(`{"digest":"sha256:0123"}`), nil
	})

	digest, err := guest.HostCall("kubewarden", "oci", "v1/manifest_digest", []byte(`"nginx:1.27"`))
	fmt.Println(string(digest), err)
	_, err = guest.HostCall("kubewarden", "kubernetes", "get_resource", []byte(`{}`))
	fmt.Println(err)
	// Output:
	// {"digest":"sha256:0123"} <nil>
	// host error: host call kubernetes/get_resource is not handled by this test
}

func ExampleHost_Logs() {
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)

	kubewarden.NewLogger(slog.LevelDebug).Debug("checked", "images", 2)
	fmt.Println(h.Logs()[0].Raw)
	// Output: {"level":"debug","message":"checked","images":2}
}

func ExampleHost_Answer() {
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)
	// The request as a value (a struct of sdk/capabilities works too); the
	// policy's payload must be the same JSON, nulls and absent fields alike.
	h.Answer("kubernetes", "get_resource",
		map[string]any{"api_version": "v1", "kind": "Namespace", "name": "shop", "disable_cache": false},
		json.RawMessage(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}`))

	ns, err := guest.HostCall("kubewarden", "kubernetes", "get_resource",
		[]byte(`{"api_version":"v1","kind":"Namespace","name":"shop","namespace":null,"disable_cache":false}`))
	fmt.Println(string(ns), err)
	// Output: {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}} <nil>
}

func ExampleHost_Fail() {
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)
	h.Fail("oci", "v1/manifest_digest", "ghcr.io/org/gone:1", "manifest unknown")

	_, err := guest.HostCall("kubewarden", "oci", "v1/manifest_digest", []byte(`"ghcr.io/org/gone:1"`))
	fmt.Println(err)
	// Output: host error: Callback evaluation failure: manifest unknown
}

func ExampleHost_Calls() {
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)
	h.Answer("net", "v1/dns_lookup_host", "example.com", map[string][]string{"ips": {"192.0.2.1"}})

	guest.HostCall("kubewarden", "net", "v1/dns_lookup_host", []byte(`"example.com"`))
	for _, call := range h.Calls() {
		fmt.Println(call.Namespace, call.Operation, string(call.Payload))
	}
	// Output: net v1/dns_lookup_host "example.com"
}

func ExampleHost_ReplaySession() {
	var c cleanups
	defer c.run()
	h := policytest.NewHost(&c)
	if err := h.ReplaySession("testdata/session.yml"); err != nil {
		fmt.Println(err)
		return
	}

	ns, err := guest.HostCall("kubewarden", "kubernetes", "get_resource",
		[]byte(`{"api_version":"v1","kind":"Namespace","name":"team-a","disable_cache":false,"field_masks":["metadata.labels"]}`))
	fmt.Println(string(ns), err)
	fmt.Println(h.SessionRemaining(), "exchanges left")
	// Output:
	// {"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"cost-center":"cc-42"},"name":"team-a"}} <nil>
	// 2 exchanges left
}
