package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// contextAwareMisbehave annotates the misbehave fixture (a policy that makes
// the host call its settings name) with contextAwareResources v1/Namespace.
func contextAwareMisbehave(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	md := filepath.Join(dir, "metadata.yml")
	os.WriteFile(md, []byte("rules:\n- {apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}\nmutating: false\ncontextAwareResources:\n- {apiVersion: v1, kind: Namespace}\n"), 0o644)
	out := filepath.Join(dir, "policy.wasm")
	if _, err := tollgate(t, "", "annotate", "-m", md, "-o", out, testfixture.Path("test/testdata/policies/misbehave/policy.raw.wasm")); err != nil {
		t.Fatal(err)
	}
	return out
}

func hostcallSettings(ns, op string, payload any) string {
	b, _ := json.Marshal(map[string]any{"behaviour": "hostcall", "namespace": ns, "operation": op, "payload": payload})
	return string(b)
}

func message(t *testing.T, out string) string {
	t.Helper()
	var r struct {
		Status struct{ Message string } `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return r.Status.Message
}

const nsSession = `- type: Exchange
  request: |
    !KubernetesGetResource
    api_version: v1
    kind: Namespace
    name: team-a
    namespace: ''
    disable_cache: false
  response:
    type: Success
    payload: '{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"cost-center":"cc-42"},"name":"team-a"}}'
`

func TestRunReplayContextAware(t *testing.T) {
	policy := contextAwareMisbehave(t)
	session := filepath.Join(t.TempDir(), "session.yml")
	os.WriteFile(session, []byte(nsSession), 0o644)
	req := ex("capabilities-drop/testdata/pod-adds-capabilities.json")
	get := hostcallSettings("kubernetes", "get_resource", map[string]any{"api_version": "v1", "kind": "Namespace", "name": "team-a", "namespace": "", "disable_cache": false})

	out, err := tollgate(t, "", "run", policy, "-r", req, "--settings-json", get, "--allow-context-aware", "--replay-host-capabilities-interactions", session)
	if err != nil {
		t.Fatal(err)
	}
	if got := message(t, out); got != `host answered: {"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"cost-center":"cc-42"},"name":"team-a"}}` {
		t.Fatalf("message %q", got)
	}
	// without --allow-context-aware the kind is not granted (kwctl: the allow list is empty)
	out, err = tollgate(t, "", "run", policy, "-r", req, "--settings-json", get, "--replay-host-capabilities-interactions", session)
	if err != nil {
		t.Fatal(err)
	}
	if got := message(t, out); !strings.Contains(got, "Policy has not been granted access to Kubernetes v1/Namespace resources. The violation has been reported.") {
		t.Fatalf("message %q", got)
	}
	// bench replays the session for every evaluation
	out, err = tollgate(t, "", "bench", policy, "-r", req, "--settings-json", get, "--allow-context-aware", "--replay-host-capabilities-interactions", session, "--count", "20", "--warmup", "2", "-o", "json")
	if err != nil || !strings.Contains(out, `"accepted": true`) {
		t.Fatalf("bench: %v\n%s", err, out)
	}
}

func TestRunRecordThenReplay(t *testing.T) {
	policy := contextAwareMisbehave(t)
	session := filepath.Join(t.TempDir(), "session.yml")
	req := ex("capabilities-drop/testdata/pod-adds-capabilities.json")
	dns := hostcallSettings("net", "v1/dns_lookup_host", "localhost")
	recorded, err := tollgate(t, "", "run", policy, "-r", req, "--settings-json", dns, "--record-host-capabilities-interactions", session)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(message(t, recorded), "127.0.0.1") {
		t.Fatalf("recorded run: %s", recorded)
	}
	replayed, err := tollgate(t, "", "run", policy, "-r", req, "--settings-json", dns, "--replay-host-capabilities-interactions", session)
	if err != nil || replayed != recorded {
		t.Fatalf("replayed %s, %v; recorded %s", replayed, err, recorded)
	}
	// a request the session does not hold is named in the answer
	other := hostcallSettings("net", "v1/dns_lookup_host", "elsewhere.test")
	out, err := tollgate(t, "", "run", policy, "-r", req, "--settings-json", other, "--replay-host-capabilities-interactions", session)
	if err != nil {
		t.Fatal(err)
	}
	if got := message(t, out); !strings.Contains(got, `Replay error: unexpected request. Was expecting DNSLookupHost {"host":"localhost"}, got DNSLookupHost {"host":"elsewhere.test"} instead`) {
		t.Fatalf("message %q", got)
	}
}

func TestRunCapabilityFlagErrors(t *testing.T) {
	policy := contextAwareMisbehave(t)
	req := ex("capabilities-drop/testdata/pod-adds-capabilities.json")
	bad := filepath.Join(t.TempDir(), "bad.yml")
	os.WriteFile(bad, []byte("- type: Exchange\n  request: 'host: x'\n  response: {type: Success, payload: '{}'}\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--replay-host-capabilities-interactions", bad}, "bad.yml: entry 1 (line 1): request: the request has no variant tag"},
		{[]string{"--replay-host-capabilities-interactions", bad, "--record-host-capabilities-interactions", bad + ".out"}, "none of the others can be"},
		{[]string{"--allowed-host-capabilities", "oci"}, `"oci" names a group of capabilities, not one: use "oci/*"`},
		{[]string{"--allow-context-aware", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, "--allow-context-aware: kubernetes configuration"},
	} {
		_, err := tollgate(t, "", append([]string{"run", policy, "-r", req}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

// reviewIn writes the capabilities-drop example request moved to namespace ns.
func reviewIn(t *testing.T, ns string) string {
	t.Helper()
	b, err := os.ReadFile(ex("capabilities-drop/testdata/pod-adds-capabilities.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	r["namespace"] = ns
	b, _ = json.Marshal(r)
	p := filepath.Join(t.TempDir(), "review.json")
	os.WriteFile(p, b, 0o644)
	return p
}

// The namespace-label fixture, a context-aware TinyGo policy, decides by
// replayed cluster answers.
func TestRunNamespaceLabelReplay(t *testing.T) {
	policy := testfixture.Path("test/testdata/policies/namespace-label/policy.wasm")
	if _, err := os.Stat(policy); err != nil {
		t.Fatalf("%v: run make policies", err)
	}
	exchange := func(name, response string) string {
		return "- type: Exchange\n  request: |\n    !KubernetesGetResource\n    api_version: v1\n    kind: Namespace\n    name: " + name +
			"\n    namespace: null\n    disable_cache: false\n  response:\n" + response
	}
	tests := []struct{ ns, response, want string }{
		{"team-a", "    type: Success\n    payload: '{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"team-a\",\"labels\":{\"cost-center\":\"cc-1\"}}}'\n",
			`"allowed":true`},
		{"bare", "    type: Success\n    payload: '{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"bare\"}}'\n",
			`"allowed":false,"status":{"message":"namespace bare has no label cost-center","code":403}`},
		{"gone", "    type: Error\n    message: Cannot find v1/Namespace named 'gone' inside of namespace 'None'\n",
			`"message":"cannot read namespace gone: Host error: Callback evaluation failure: Cannot find v1/Namespace named 'gone' inside of namespace 'None'"`},
	}
	for _, tt := range tests {
		session := filepath.Join(t.TempDir(), "session.yml")
		os.WriteFile(session, []byte(exchange(tt.ns, tt.response)), 0o644)
		out, err := tollgate(t, "", "run", policy, "-r", reviewIn(t, tt.ns), "--settings-json", `{"label":"cost-center"}`,
			"--allow-context-aware", "--replay-host-capabilities-interactions", session)
		if err != nil || !strings.Contains(out, tt.want) {
			t.Errorf("%s: %v\n%s\nwant %s", tt.ns, err, out, tt.want)
		}
	}
}
