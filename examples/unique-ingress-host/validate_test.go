package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/policytest"
)

func init() {
	// Natively, the policy's host calls go to sdk/guest, which policytest answers, and its
	// operations are registered there too (main registers them with the TinyGo waPC guest).
	host = capabilities.Host{Call: guest.HostCall}
	guest.RegisterFunctions(map[string]guest.Function{"validate": validate, "validate_settings": validateSettings})
}

// ingressList is a list_resources_all answer holding Ingresses given as "namespace/name=host,host".
func ingressList(t *testing.T, specs ...string) json.RawMessage {
	t.Helper()
	items := []any{}
	for _, s := range specs {
		id, hosts, _ := strings.Cut(s, "=")
		ns, name, _ := strings.Cut(id, "/")
		var rules []any
		for _, h := range strings.Split(hosts, ",") {
			rules = append(rules, map[string]any{"host": h})
		}
		items = append(items, map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"rules": rules},
		})
	}
	b, err := json.Marshal(map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "IngressList", "metadata": map[string]any{}, "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name        string
		settings    map[string]any
		cluster     []string // the Ingresses the host lists; nil: the list fails
		listErr     string
		wantAccept  bool
		wantMessage string
		wantCode    uint16
	}{
		{name: "no other Ingress", cluster: []string{}, wantAccept: true},
		{name: "itself (an UPDATE) is no conflict", cluster: []string{"shop/web=shop.example.com,api.example.com"}, wantAccept: true},
		{name: "other hosts only", cluster: []string{"team-b/blog=blog.example.com"}, wantAccept: true},
		{
			name: "a host used in another namespace", cluster: []string{"team-b/storefront=shop.example.com", "team-c/blog=blog.example.com"},
			wantMessage: `Ingress shop/web: host "shop.example.com" is already used by Ingress team-b/storefront`, wantCode: 409,
		},
		{
			name: "every conflict is listed, sorted", cluster: []string{"team-c/x=api.example.com,shop.example.com", "team-b/y=shop.example.com"},
			wantMessage: `Ingress shop/web: host "api.example.com" is already used by Ingress team-c/x; host "shop.example.com" is already used by Ingress team-b/y; host "shop.example.com" is already used by Ingress team-c/x`,
			wantCode:    409,
		},
		{
			name: "the same namespace conflicts by default", cluster: []string{"shop/web-v2=shop.example.com"},
			wantMessage: `Ingress shop/web: host "shop.example.com" is already used by Ingress shop/web-v2`, wantCode: 409,
		},
		{name: "allowSameNamespace", settings: map[string]any{"allowSameNamespace": true}, cluster: []string{"shop/web-v2=shop.example.com"}, wantAccept: true},
		{
			name: "allowSameNamespace still refuses other namespaces", settings: map[string]any{"allowSameNamespace": true},
			cluster:     []string{"shop/web-v2=shop.example.com", "team-b/x=shop.example.com"},
			wantMessage: `Ingress shop/web: host "shop.example.com" is already used by Ingress team-b/x`, wantCode: 409,
		},
		{
			name: "the host cannot list", listErr: "Policy has not been granted access to Kubernetes networking.k8s.io/v1/Ingress resources. The violation has been reported.",
			wantMessage: "cannot list the cluster's Ingresses: kubernetes/list_resources_all: host error: Callback evaluation failure: Policy has not been granted access",
			wantCode:    500,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := policytest.NewHost(t)
			if tt.listErr != "" {
				if err := h.Fail("kubernetes", "list_resources_all", listIngresses, tt.listErr); err != nil {
					t.Fatal(err)
				}
			} else if err := h.Answer("kubernetes", "list_resources_all", listIngresses, ingressList(t, tt.cluster...)); err != nil {
				t.Fatal(err)
			}
			payload, err := policytest.BuildValidationRequestFromFixture("testdata/ingress-shop-web.json", tt.settings)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := policytest.Validate(payload)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Accepted != tt.wantAccept {
				t.Fatalf("accepted = %v (message %v), want %v", resp.Accepted, deref(resp.Message), tt.wantAccept)
			}
			if !tt.wantAccept {
				if !strings.HasPrefix(deref(resp.Message), tt.wantMessage) || resp.Code == nil || *resp.Code != tt.wantCode {
					t.Fatalf("message %q code %v, want %q code %d", deref(resp.Message), resp.Code, tt.wantMessage, tt.wantCode)
				}
			}
			if calls := h.Calls(); len(calls) != 1 {
				t.Errorf("%d host calls, want 1", len(calls))
			}
		})
	}
}

func TestNoHostNoCall(t *testing.T) {
	h := policytest.NewHost(t)
	payload, err := policytest.BuildValidationRequestForObject(map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"metadata": map[string]any{"name": "default-backend", "namespace": "shop"},
		"spec":     map[string]any{"defaultBackend": map[string]any{"service": map[string]any{"name": "web", "port": map[string]any{"number": 80}}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := policytest.Validate(payload)
	if err != nil || !resp.Accepted {
		t.Fatalf("accepted = %v, %v", resp.Accepted, err)
	}
	if n := len(h.Calls()); n != 0 {
		t.Errorf("an Ingress without hosts made %d host calls", n)
	}
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		settings  string
		wantValid bool
		wantMsg   string
	}{
		{settings: `{}`, wantValid: true},
		{settings: `{"allowSameNamespace":true}`, wantValid: true},
		{settings: `{"allowSameNamespaces":true}`, wantMsg: `settings: json: unknown field "allowSameNamespaces"`},
		{settings: `{"allowSameNamespace":"yes"}`, wantMsg: "settings: json: cannot unmarshal string"},
	}
	for _, tt := range tests {
		t.Run(tt.settings, func(t *testing.T) {
			resp, err := policytest.ValidateSettings(json.RawMessage(tt.settings))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Valid != tt.wantValid || !strings.HasPrefix(deref(resp.Message), tt.wantMsg) {
				t.Fatalf("valid %v message %q, want %v %q", resp.Valid, deref(resp.Message), tt.wantValid, tt.wantMsg)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestReplaySessions replays the kwctl sessions recorded by test/e2e's TestUniqueIngressHost
// against a real kube-apiserver (tollgate run --record-host-capabilities-interactions): the
// policy makes exactly the recorded call and decides by the recorded Ingresses.
func TestReplaySessions(t *testing.T) {
	tests := []struct {
		session     string
		wantAccept  bool
		wantMessage string
	}{
		{session: "testdata/session-conflict.yml", wantMessage: `Ingress shop/web: host "shop.example.com" is already used by Ingress team-b/storefront`},
		{session: "testdata/session-free.yml", wantAccept: true},
	}
	for _, tt := range tests {
		t.Run(tt.session, func(t *testing.T) {
			h := policytest.NewHost(t)
			if err := h.ReplaySession(tt.session); err != nil {
				t.Fatal(err)
			}
			payload, err := policytest.BuildValidationRequestFromFixture("testdata/ingress-shop-web.json", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := policytest.Validate(payload)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Accepted != tt.wantAccept || deref(resp.Message) != tt.wantMessage {
				t.Fatalf("accepted %v message %q, want %v %q", resp.Accepted, deref(resp.Message), tt.wantAccept, tt.wantMessage)
			}
			if n := h.SessionRemaining(); n != 0 {
				t.Errorf("%d recorded exchanges left unused", n)
			}
		})
	}
}

// TestMalformed: a request object or a listed item of the wrong shape is refused with the field
// named, as decoding it into a struct with encoding/json would refuse it.
func TestMalformed(t *testing.T) {
	t.Run("request object", func(t *testing.T) {
		policytest.NewHost(t)
		payload := []byte(`{"request":{"uid":"u","operation":"CREATE","namespace":"shop","kind":{"group":"networking.k8s.io","version":"v1","kind":"Ingress"},` +
			`"object":{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":5,"namespace":"shop"}}},"settings":{}}`)
		resp, err := policytest.Validate(payload)
		if err != nil || resp.Accepted || resp.Code == nil || *resp.Code != 400 ||
			deref(resp.Message) != "the request's object is not an Ingress: metadata.name is not a string" {
			t.Fatalf("%+v %q %v", resp, deref(resp.Message), err)
		}
	})
	for name, items := range map[string]string{
		"item not an object": `["x"]`,
		"rules not a list":   `[{"metadata":{"name":"a","namespace":"b"},"spec":{"rules":{"host":"shop.example.com"}}}]`,
		"host not a string":  `[{"metadata":{"name":"a","namespace":"b"},"spec":{"rules":[{"host":1}]}}]`,
	} {
		t.Run(name, func(t *testing.T) {
			h := policytest.NewHost(t)
			if err := h.Answer("kubernetes", "list_resources_all", listIngresses, json.RawMessage(`{"kind":"IngressList","items":`+items+`}`)); err != nil {
				t.Fatal(err)
			}
			payload, err := policytest.BuildValidationRequestFromFixture("testdata/ingress-shop-web.json", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := policytest.Validate(payload)
			if err != nil || resp.Accepted || resp.Code == nil || *resp.Code != 500 ||
				!strings.HasPrefix(deref(resp.Message), "the host's list of Ingresses holds an item that is not an Ingress: ") {
				t.Fatalf("%+v %q %v", resp, deref(resp.Message), err)
			}
		})
	}
	t.Run("null fields are empty", func(t *testing.T) {
		h := policytest.NewHost(t)
		if err := h.Answer("kubernetes", "list_resources_all", listIngresses,
			json.RawMessage(`{"kind":"IngressList","items":[{"metadata":null,"spec":{"rules":null}},{"metadata":{"name":null},"spec":null}]}`)); err != nil {
			t.Fatal(err)
		}
		payload, err := policytest.BuildValidationRequestFromFixture("testdata/ingress-shop-web.json", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := policytest.Validate(payload); err != nil || !resp.Accepted {
			t.Fatalf("%+v %q %v", resp, deref(resp.Message), err)
		}
	})
}
