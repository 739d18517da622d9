package capabilities

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fake records the one call it gets and answers it.
type fake struct {
	binding, namespace, operation, payload string
	answer                                 string
	err                                    error
}

func (f *fake) call(binding, namespace, operation string, payload []byte) ([]byte, error) {
	f.binding, f.namespace, f.operation, f.payload = binding, namespace, operation, string(payload)
	if f.err != nil {
		return nil, f.err
	}
	return []byte(f.answer), nil
}

func TestWireFormats(t *testing.T) {
	tests := []struct {
		name        string
		answer      string
		do          func(h Host) (any, error)
		wantCap     string
		wantPayload string
		want        any
	}{
		{
			name:   "get_resource, cluster-scoped",
			answer: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`,
			do: func(h Host) (any, error) {
				return h.GetResource(GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: "a"})
			},
			wantCap:     "kubernetes/get_resource",
			wantPayload: `{"api_version":"v1","kind":"Namespace","name":"a","disable_cache":false}`,
			want:        json.RawMessage(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`),
		},
		{
			name:   "get_resource into a struct, namespaced, masks, no cache",
			answer: `{"metadata":{"name":"d","labels":{"a":"b"}}}`,
			do: func(h Host) (any, error) {
				var v struct {
					Metadata struct {
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
				}
				err := h.GetResourceInto(GetResourceRequest{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", Namespace: "ns",
					DisableCache: true, FieldMasks: []string{"metadata.labels"}}, &v)
				return v.Metadata.Labels, err
			},
			wantCap:     "kubernetes/get_resource",
			wantPayload: `{"api_version":"apps/v1","kind":"Deployment","name":"d","namespace":"ns","disable_cache":true,"field_masks":["metadata.labels"]}`,
			want:        map[string]string{"a": "b"},
		},
		{
			name:   "list_resources_by_namespace",
			answer: `{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[{"metadata":{"name":"p"}}]}`,
			do: func(h Host) (any, error) {
				l, err := h.ListResourcesByNamespace(ListResourcesByNamespaceRequest{APIVersion: "v1", Kind: "Pod", Namespace: "ns", LabelSelector: "app=web"})
				return len(l.Items), err
			},
			wantCap:     "kubernetes/list_resources_by_namespace",
			wantPayload: `{"api_version":"v1","kind":"Pod","namespace":"ns","label_selector":"app=web"}`,
			want:        1,
		},
		{
			name:   "list_resources_all",
			answer: `{"apiVersion":"networking.k8s.io/v1","kind":"IngressList","metadata":{},"items":[]}`,
			do: func(h Host) (any, error) {
				l, err := h.ListAllResources(ListAllResourcesRequest{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", FieldSelector: "metadata.name=x"})
				return l.Kind, err
			},
			wantCap:     "kubernetes/list_resources_all",
			wantPayload: `{"api_version":"networking.k8s.io/v1","kind":"Ingress","field_selector":"metadata.name=x"}`,
			want:        "IngressList",
		},
		{
			name:   "can_i sends resource_attributes in snake_case",
			answer: `{"allowed":false,"reason":"no RBAC policy matched"}`,
			do: func(h Host) (any, error) {
				return h.CanI(CanIRequest{SubjectAccessReview: SubjectAccessReview{User: "alice", Groups: []string{"dev"},
					ResourceAttributes: ResourceAttributes{Namespace: "ns", Verb: "create", Resource: "pods"}}})
			},
			wantCap:     "kubernetes/can_i",
			wantPayload: `{"subject_access_review":{"user":"alice","groups":["dev"],"resource_attributes":{"namespace":"ns","verb":"create","resource":"pods"}},"disable_cache":false}`,
			want:        SubjectAccessReviewStatus{Allowed: false, Reason: "no RBAC policy matched"},
		},
		{
			name:        "manifest_digest",
			answer:      `{"digest":"sha256:abc"}`,
			do:          func(h Host) (any, error) { return h.ManifestDigest("busybox:1.36") },
			wantCap:     "oci/v1/manifest_digest",
			wantPayload: `"busybox:1.36"`,
			want:        "sha256:abc",
		},
		{
			name:        "oci_manifest",
			answer:      `{"schemaVersion":2}`,
			do:          func(h Host) (any, error) { return h.OCIManifest("ghcr.io/org/app:1") },
			wantCap:     "oci/v1/oci_manifest",
			wantPayload: `"ghcr.io/org/app:1"`,
			want:        json.RawMessage(`{"schemaVersion":2}`),
		},
		{
			name:   "oci_manifest_config",
			answer: `{"manifest":{"schemaVersion":2},"digest":"sha256:d","config":{"architecture":"amd64"}}`,
			do: func(h Host) (any, error) {
				mc, err := h.OCIManifestConfig("ghcr.io/org/app:1")
				return mc.Digest + " " + string(mc.Config), err
			},
			wantCap:     "oci/v1/oci_manifest_config",
			wantPayload: `"ghcr.io/org/app:1"`,
			want:        `sha256:d {"architecture":"amd64"}`,
		},
		{
			name:        "dns_lookup_host",
			answer:      `{"ips":["10.0.0.1","::1"]}`,
			do:          func(h Host) (any, error) { return h.LookupHost("example.com") },
			wantCap:     "net/v1/dns_lookup_host",
			wantPayload: `"example.com"`,
			want:        []string{"10.0.0.1", "::1"},
		},
		{
			name:   "is_certificate_trusted sends bytes as numbers",
			answer: `{"trusted":false,"reason":"Certificate is not trusted by the provided cert chain"}`,
			do: func(h Host) (any, error) {
				return h.IsCertificateTrusted(CertificateVerificationRequest{
					Cert:      Certificate{Encoding: EncodingPEM, Data: []byte("-A")},
					CertChain: []Certificate{{Encoding: EncodingDER, Data: []byte{0, 255}}},
					NotAfter:  "2030-01-01T00:00:00Z",
				})
			},
			wantCap:     "crypto/v1/is_certificate_trusted",
			wantPayload: `{"cert":{"encoding":"Pem","data":[45,65]},"cert_chain":[{"encoding":"Der","data":[0,255]}],"not_after":"2030-01-01T00:00:00Z"}`,
			want:        CertificateVerification{Trusted: false, Reason: "Certificate is not trusted by the provided cert chain"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{answer: tt.answer}
			got, err := tt.do(Host{Call: f.call})
			if err != nil {
				t.Fatal(err)
			}
			if f.binding != "kubewarden" || f.namespace+"/"+f.operation != tt.wantCap {
				t.Errorf("called %s %s/%s, want kubewarden %s", f.binding, f.namespace, f.operation, tt.wantCap)
			}
			if f.payload != tt.wantPayload {
				t.Errorf("payload\n got %s\nwant %s", f.payload, tt.wantPayload)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("answer %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	notFound := errors.New("Callback evaluation failure: Cannot find v1/Namespace named 'x' inside of namespace 'None'")
	f := &fake{err: notFound}
	_, err := Host{Call: f.call}.GetResource(GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: "x"})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Capability != "kubernetes/get_resource" || !errors.Is(err, notFound) {
		t.Fatalf("err = %v, want a CallError of kubernetes/get_resource wrapping the host's", err)
	}
	if !IsNotFound(err) || IsAccessDenied(err) {
		t.Errorf("IsNotFound = %v, IsAccessDenied = %v", IsNotFound(err), IsAccessDenied(err))
	}
	denied := &fake{err: errors.New("Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported.")}
	_, err = Host{Call: denied.call}.ListAllResources(ListAllResourcesRequest{APIVersion: "v1", Kind: "Secret"})
	if !IsAccessDenied(err) || IsNotFound(err) {
		t.Errorf("denial: IsAccessDenied = %v, IsNotFound = %v", IsAccessDenied(err), IsNotFound(err))
	}
	if _, err := (Host{}).LookupHost("x"); !errors.Is(err, ErrNoCall) {
		t.Errorf("nil Call: err = %v, want ErrNoCall", err)
	}
	bad := &fake{answer: `not json`}
	if _, err := (Host{Call: bad.call}).CanI(CanIRequest{}); err == nil || !strings.Contains(err.Error(), "kubernetes/can_i: cannot decode the host's answer") {
		t.Errorf("bad answer: err = %v", err)
	}
	if IsNotFound(nil) || IsAccessDenied(nil) {
		t.Error("nil is neither")
	}
}
