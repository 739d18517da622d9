package capabilities

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDispatchErrors(t *testing.T) {
	k, _ := fakeCluster(t, KubeOptions{})
	f := newTestHost(t, Options{Kubernetes: k}, Allow{Resources: []Resource{{"v1", "Namespace"}}})
	tests := []struct {
		name, binding, ns, op, payload, want string
	}{
		{"unknown binding", "other", "kubernetes", "get_resource", `{}`, "unknown binding: other"},
		{"unknown namespace", "kubewarden", "nope", "x", `{}`, "unknown namespace: nope"},
		{"unknown operation", "kubewarden", "kubernetes", "delete_everything", `{}`, "unknown operation: delete_everything"},
		{"unknown oci operation", "kubewarden", "oci", "v9/x", `""`, "unknown operation: v9/x"},
		{"tracing other than log", "kubewarden", "tracing", "trace", `{}`, "unknown operation: trace"},
		{"undeclared kind", "kubewarden", "kubernetes", "get_resource",
			`{"api_version":"v1","kind":"Secret","name":"s","namespace":"default","disable_cache":false}`,
			"Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported."},
		{"kind is case-sensitive", "kubewarden", "kubernetes", "list_resources_all",
			`{"api_version":"v1","kind":"namespace"}`,
			"Policy has not been granted access to Kubernetes v1/namespace resources. The violation has been reported."},
		{"apiVersion must match exactly", "kubewarden", "kubernetes", "list_resources_by_namespace",
			`{"api_version":"apps/v1","kind":"Namespace","namespace":"x"}`,
			"Policy has not been granted access to Kubernetes apps/v1/Namespace resources. The violation has been reported."},
		{"payload not a string", "kubewarden", "net", "v1/dns_lookup_host", `42`,
			"invalid host call payload: json: cannot unmarshal number into Go value of type string"},
		{"empty payload", "kubewarden", "kubernetes", "can_i", ``,
			"invalid host call payload: unexpected end of JSON input"},
		{"sigstore", "kubewarden", "oci", "v2/verify", `{"type":"SigstorePubKeyVerify","image":"x","pub_keys":[]}`,
			"Callback evaluation failure: sigstore verification (SigstorePubKeyVerify) is not supported by tollgate yet"},
		{"sigstore v1 unknown variant", "kubewarden", "oci", "v1/verify", `{"Nope":{}}`, "unknown variant `Nope`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := f(context.Background(), tt.binding, tt.ns, tt.op, []byte(tt.payload))
			if out != nil {
				t.Errorf("answer %q with an error", out)
			}
			wantErr(t, err, tt.want)
		})
	}
}

func TestHostCapabilitiesGate(t *testing.T) {
	tests := []struct {
		patterns []string
		path     string
		allowed  bool
	}{
		{nil, "oci/v1/verify", true},
		{[]string{"*"}, "kubernetes/can_i", true},
		{[]string{"oci/*", "*"}, "net/v1/dns_lookup_host", true},
		{[]string{}, "net/v1/dns_lookup_host", false},
		{[]string{"kubernetes/*"}, "kubernetes/list_resources_all", true},
		{[]string{"kubernetes/*"}, "oci/v1/manifest_digest", false},
		{[]string{"oci/v1/*"}, "oci/v1/oci_manifest", true},
		{[]string{"oci/v1/*"}, "oci/v2/verify", false},
		{[]string{"net/v1/dns_lookup_host"}, "net/v1/dns_lookup_host", true},
		{[]string{"net/v1/dns_lookup_host"}, "crypto/v1/is_certificate_trusted", false},
	}
	for _, tt := range tests {
		c, err := compilePatterns(tt.patterns)
		if err != nil {
			t.Fatalf("%q: %v", tt.patterns, err)
		}
		if got := c.allows(tt.path); got != tt.allowed {
			t.Errorf("%q allows %s = %v, want %v", tt.patterns, tt.path, got, tt.allowed)
		}
	}
	for _, bad := range []string{"", "oci*", "oci/v1/oci_*", "oci", "oci/v1", "oci/v3/*", "nope/*", "kubernetes/delete", "*/get_resource", "tracing/log"} {
		_, err := compilePatterns([]string{bad})
		if !errors.Is(err, ErrPattern) {
			t.Errorf("%q: error %v, want ErrPattern", bad, err)
		}
	}
	if _, err := compilePatterns([]string{"oci/v1"}); err == nil || !strings.Contains(err.Error(), `use "oci/v1/*"`) {
		t.Errorf("oci/v1: %v, want a suggestion of oci/v1/*", err)
	}
	if _, err := New(Options{}).ForPolicy("p", Allow{HostCapabilities: []string{"oci"}}); err == nil ||
		!strings.HasPrefix(err.Error(), "invalid hostCapabilities pattern for policy p: ") {
		t.Errorf("ForPolicy: %v", err)
	}
}

func TestDenialIsReportedAndCounted(t *testing.T) {
	h := New(Options{})
	f, _ := h.ForPolicy("restricted", Allow{HostCapabilities: []string{"kubernetes/*"}})
	_, err := f(context.Background(), "kubewarden", "oci", "v1/verify", []byte(`{}`))
	wantErr(t, err, "Policy has not been granted access to the 'oci/v1/verify' host capability. The violation has been reported.")
	if v := gaugeValue(t, h, "tollgate_capability_denials_total", "restricted"); v != 1 {
		t.Fatalf("denials = %v, want 1", v)
	}
	// the gate comes before payload decoding
	_, err = f(context.Background(), "kubewarden", "net", "v1/dns_lookup_host", []byte(`not json`))
	wantErrContains(t, err, "has not been granted access to the 'net/v1/dns_lookup_host' host capability")
}

func TestDNSLookup(t *testing.T) {
	f := newTestHost(t, Options{}, Allow{})
	got, err := call(t, f, "net", "v1/dns_lookup_host", `"localhost"`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, `{"ips":[`) || !strings.Contains(got, "127.0.0.1") {
		t.Fatalf("got %s", got)
	}
	_, err = call(t, f, "net", "v1/dns_lookup_host", `"no-such-host.invalid"`)
	wantErrContains(t, err, "Callback evaluation failure: lookup no-such-host.invalid")
}

type fakeOCI struct{ calls int }

func (f *fakeOCI) ImageDigest(_ context.Context, image string) (string, error) {
	f.calls++
	if image == "missing:1" {
		return "", errors.New("not found in registry: missing:1")
	}
	return "sha256:aaaa", nil
}

func (f *fakeOCI) ImageManifest(context.Context, string) (string, string, []byte, error) {
	f.calls++
	return "application/vnd.oci.image.manifest.v1+json", "sha256:aaaa", []byte(`{"schemaVersion":2}`), nil
}

func (f *fakeOCI) ImageManifestAndConfig(context.Context, string) ([]byte, string, []byte, error) {
	f.calls++
	return []byte(`{"schemaVersion":2}`), "sha256:bbbb", []byte(`{"os":"linux"}`), nil
}

func TestOCI(t *testing.T) {
	o := &fakeOCI{}
	f := newTestHost(t, Options{OCI: o}, Allow{})
	for _, tt := range []struct{ op, want string }{
		{"v1/manifest_digest", `{"digest":"sha256:aaaa"}`},
		{"v1/manifest_digest", `{"digest":"sha256:aaaa"}`}, // cached
		{"v1/oci_manifest", `{"schemaVersion":2}`},
		{"v1/oci_manifest_config", `{"manifest":{"schemaVersion":2},"digest":"sha256:bbbb","config":{"os":"linux"}}`},
	} {
		got, err := call(t, f, "oci", tt.op, `"ghcr.io/x/y:1"`)
		if err != nil || got != tt.want {
			t.Fatalf("%s: got %s, %v; want %s", tt.op, got, err, tt.want)
		}
	}
	if o.calls != 3 {
		t.Fatalf("%d registry calls, want 3", o.calls)
	}
	_, err := call(t, f, "oci", "v1/manifest_digest", `"missing:1"`)
	wantErr(t, err, "Callback evaluation failure: not found in registry: missing:1")
	f2 := newTestHost(t, Options{}, Allow{})
	_, err = call(t, f2, "oci", "v1/manifest_digest", `"x"`)
	wantErr(t, err, "Callback evaluation failure: no OCI registry client is configured")
}
