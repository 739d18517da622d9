package capabilities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kwctlCalls are the guest calls that testdata/session-kwctl.yml answers, in order.
var kwctlCalls = []struct{ ns, op, payload, want, wantErr string }{
	{"kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"team-a","namespace":"","disable_cache":false}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"cost-center":"cc-42"},"name":"team-a"}}`, ""},
	{"kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"missing","disable_cache":false}`,
		"", "Callback evaluation failure: Cannot find v1/Namespace named 'missing' inside of namespace 'None'"},
	// policy-sdk-go's camelCase resourceAttributes, absent Options
	{"kubernetes", "can_i", `{"subject_access_review":{"resourceAttributes":{"group":"","resource":"pods","verb":"create"},"user":"system:serviceaccount:default:builder"},"disable_cache":false}`,
		`{"allowed":true}`, ""},
	// field_masks are a set; a list's disable_cache may be absent
	{"kubernetes", "list_resources_all", `{"api_version":"networking.k8s.io/v1","kind":"Ingress","field_masks":["metadata.name","spec.rules.host"]}`,
		`{"apiVersion":"networking.k8s.io/v1","kind":"IngressList","metadata":{},"items":[]}`, ""},
	{"net", "v1/dns_lookup_host", `"example.test"`, `{"ips":["192.0.2.7"]}`, ""},
	{"oci", "v1/manifest_digest", `"ghcr.io/example/app:1.0"`, `{"digest":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`, ""},
}

var kwctlAllow = Allow{Resources: []Resource{{"v1", "Namespace"}, {"networking.k8s.io/v1", "Ingress"}}}

func TestReplayKwctlSession(t *testing.T) {
	r, err := LoadSession("testdata/session-kwctl.yml")
	if err != nil {
		t.Fatal(err)
	}
	f := newTestHost(t, Options{Replay: r}, kwctlAllow)
	for i, c := range kwctlCalls {
		got, err := call(t, f, c.ns, c.op, c.payload)
		if c.wantErr != "" {
			wantErr(t, err, c.wantErr)
			continue
		}
		if err != nil || got != c.want {
			t.Fatalf("call %d: got %s, %v; want %s", i, got, err, c.want)
		}
	}
	if r.Remaining() != 0 {
		t.Fatalf("%d exchanges left", r.Remaining())
	}
	_, err = call(t, f, "net", "v1/dns_lookup_host", `"again.test"`)
	if !errors.Is(err, nil) && !strings.Contains(err.Error(), "the list of recorded responses is empty") ||
		!strings.Contains(err.Error(), `DNSLookupHost {"host":"again.test"}`) {
		t.Fatalf("got %v", err)
	}
}

func TestReplayMismatch(t *testing.T) {
	r, err := LoadSession("testdata/session-kwctl.yml")
	if err != nil {
		t.Fatal(err)
	}
	f := newTestHost(t, Options{Replay: r}, kwctlAllow)
	_, err = call(t, f, "kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"team-b","namespace":"","disable_cache":false}`)
	want := `Callback evaluation failure: Replay error: unexpected request. Was expecting KubernetesGetResource {"api_version":"v1","disable_cache":false,"kind":"Namespace","name":"team-a","namespace":""}, got KubernetesGetResource {"api_version":"v1","disable_cache":false,"kind":"Namespace","name":"team-b","namespace":""} instead (session testdata/session-kwctl.yml, entry 1, line 3)`
	wantErr(t, err, want)
	// the entry was consumed, as in kwctl: the next call meets entry 2
	_, err = call(t, f, "kubernetes", "get_resource", kwctlCalls[1].payload)
	wantErr(t, err, kwctlCalls[1].wantErr)
}

func TestSessionFileErrors(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"not YAML", "- type: [", "host capabilities session bad.yml: not YAML"},
		{"not a list", "type: Exchange", "host capabilities session bad.yml: line 1: want a list of exchanges"},
		{"no tag", "- type: Exchange\n  request: 'api_version: v1'\n  response: {type: Success, payload: '{}'}\n",
			"host capabilities session bad.yml: entry 1 (line 1): request: the request has no variant tag"},
		{"bad response type", "- type: Exchange\n  request: \"!DNSLookupHost\\nhost: x\\n\"\n  response: {type: Maybe}\n- type: Exchange\n",
			"host capabilities session bad.yml: entry 1 (line 1): response type is \"Maybe\", want Success or Error"},
		{"second entry bad", "- type: Exchange\n  request: \"!DNSLookupHost\\nhost: x\\n\"\n  response: {type: Success, payload: '{}'}\n- type: Nope\n",
			"host capabilities session bad.yml: entry 2 (line 4): type is \"Nope\", want Exchange"},
		{"success without payload", "- type: Exchange\n  request: \"!DNSLookupHost\\nhost: x\\n\"\n  response: {type: Success}\n",
			"host capabilities session bad.yml: entry 1 (line 1): a Success response needs a payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSession("bad.yml", []byte(tt.data))
			if !errors.Is(err, ErrSession) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want one starting %q", err, tt.want)
			}
		})
	}
	if _, err := LoadSession(filepath.Join(t.TempDir(), "none.yml")); !errors.Is(err, ErrSession) {
		t.Fatalf("missing file: %v", err)
	}
	if r, err := ParseSession("empty.yml", nil); err != nil || r.Len() != 0 {
		t.Fatalf("empty file: %v", err)
	}
}

// Record against a cluster, then replay the file without one: same answers,
// same errors.
func TestRecordThenReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.yml")
	rec, err := NewRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := fakeCluster(t, KubeOptions{})
	live := newTestHost(t, Options{Kubernetes: k, Record: rec, OCI: &fakeOCI{}}, Allow{Resources: allResources})
	calls := []struct{ ns, op, payload string }{
		{"kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"default","namespace":"","disable_cache":false}`},
		{"kubernetes", "get_resource", `{"api_version":"v1","kind":"ConfigMap","name":"nope","namespace":"default","disable_cache":true,"field_masks":["data"]}`},
		{"kubernetes", "list_resources_by_namespace", `{"api_version":"v1","kind":"ConfigMap","namespace":"default","label_selector":"app=x"}`},
		{"kubernetes", "can_i", `{"subject_access_review":{"groups":["a","b"],"resource_attributes":{"resource":"pods","verb":"get"},"user":"alice"},"disable_cache":true}`},
		{"oci", "v1/oci_manifest_config", `"ghcr.io/x/y:1"`},
		{"net", "v1/dns_lookup_host", `"localhost"`},
		{"crypto", "v1/is_certificate_trusted", `{"cert":{"encoding":"Pem","data":[110,111]},"cert_chain":null,"not_after":null}`},
		{"oci", "v2/verify", `{"type":"SigstoreKeylessVerify","image":"ghcr.io/x/y:1","keyless":[{"issuer":"i","subject":"s"}],"annotations":null}`},
	}
	type answer struct {
		out string
		err string
	}
	var want []answer
	for _, c := range calls {
		out, err := call(t, live, c.ns, c.op, c.payload)
		a := answer{out: out}
		if err != nil {
			a.err = err.Error()
		}
		want = append(want, a)
	}
	// denied calls are not recorded
	if _, err := call(t, live, "kubernetes", "get_resource", `{"api_version":"v1","kind":"Secret","name":"s","namespace":"x","disable_cache":false}`); err == nil {
		t.Fatal("Secret not denied")
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	if rec.Len() != len(calls) {
		t.Fatalf("recorded %d exchanges, want %d", rec.Len(), len(calls))
	}
	rep, err := LoadSession(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("%v\n%s", err, b)
	}
	replay := newTestHost(t, Options{Replay: rep}, Allow{Resources: allResources})
	for i, c := range calls {
		out, err := call(t, replay, c.ns, c.op, c.payload)
		got := answer{out: out}
		if err != nil {
			got.err = err.Error()
		}
		if got != want[i] {
			t.Fatalf("call %d (%s/%s): replayed %+v, recorded %+v", i, c.ns, c.op, got, want[i])
		}
	}
	if !strings.Contains(want[1].err, "Cannot find v1/ConfigMap") || !strings.Contains(want[7].err, "not supported") {
		t.Fatalf("the recording lacks the expected errors: %+v", want)
	}
}

func TestRecorderEmptySession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.yml")
	rec, err := NewRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "[]\n" {
		t.Fatalf("got %q", b)
	}
	if _, err := LoadSession(path); err != nil {
		t.Fatal(err)
	}
}

func TestReplayIgnoresContextOfCall(t *testing.T) {
	r, _ := ParseSession("s", []byte("- type: Exchange\n  request: \"!DNSLookupHost\\nhost: x\\n\"\n  response: {type: Success, payload: '{\"ips\":[]}'}\n"))
	f := newTestHost(t, Options{Replay: r}, Allow{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := f(ctx, "kubewarden", "net", "v1/dns_lookup_host", []byte(`"x"`))
	if err != nil || string(out) != `{"ips":[]}` {
		t.Fatalf("%s %v", out, err)
	}
}
