package capabilities

import (
	"context"
	"os"
	"testing"
	"time"
)

// FuzzParseSession: any bytes give a session or an error, never a panic.
func FuzzParseSession(f *testing.F) {
	b, _ := os.ReadFile("testdata/session-kwctl.yml")
	f.Add(b)
	f.Add([]byte("[]"))
	f.Add([]byte("- type: Exchange\n  request: \"!X\\na: 1\\n\"\n  response: {type: Error, message: m}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseSession("fuzz.yml", data)
		if err == nil && r.Len() < 0 {
			t.Fatal("negative length")
		}
	})
}

// FuzzHostCall: any host call gets an answer or an error, never a panic,
// from a host whose Kubernetes capability is a fake cluster.
func FuzzHostCall(f *testing.F) {
	f.Add("kubernetes", "get_resource", []byte(`{"api_version":"v1","kind":"Namespace","name":"default","disable_cache":true}`))
	f.Add("kubernetes", "list_resources_by_namespace", []byte(`{"api_version":"v1","kind":"ConfigMap","namespace":"default","label_selector":"a in (b)","field_masks":["data.x"]}`))
	f.Add("kubernetes", "can_i", []byte(`{"subject_access_review":{"resourceAttributes":{"resource":"pods","verb":"get"},"user":"u"},"disable_cache":true}`))
	f.Add("crypto", "v1/is_certificate_trusted", []byte(`{"cert":{"encoding":"Der","data":[48,1,2]},"cert_chain":[],"not_after":"2020-01-01T00:00:00Z"}`))
	f.Add("oci", "v2/verify", []byte(`{"type":"SigstoreGithubActionsVerify","image":"x","owner":"o"}`))
	f.Add("oci", "v1/verify", []byte(`{"SigstorePubKeyVerify":[]}`))
	k, _ := fakeCluster(f, KubeOptions{MaxCachedObjects: -1})
	h := New(Options{Kubernetes: k, OCI: &fakeOCI{}})
	call, err := h.ForPolicy("fuzz", Allow{Resources: allResources, HostCapabilities: []string{"kubernetes/*", "crypto/*", "oci/*"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ns, op string, payload []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		out, err := call(ctx, "kubewarden", ns, op, payload)
		if err == nil && out == nil {
			t.Fatalf("%s/%s: no answer and no error", ns, op)
		}
	})
}
