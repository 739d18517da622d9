package capabilities_test

import (
	"encoding/json"
	"fmt"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/policytest"
)

// In a policy built with standard Go the host is guest.HostCall (wasi.HostCall
// in the WASI mode, wapc.HostCall with TinyGo). Natively, as here, a
// policytest.Host answers guest.HostCall with canned answers.
var host = capabilities.Host{Call: guest.HostCall}

type cleanups []func()

func (c *cleanups) Cleanup(f func()) { *c = append(*c, f) }
func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// fakeHost installs a policytest.Host until done is called.
func fakeHost() (*policytest.Host, func()) {
	var c cleanups
	return policytest.NewHost(&c), c.run
}

func ExampleHost_GetResource() {
	h, done := fakeHost()
	defer done()
	req := capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: "team-a"}
	h.Answer("kubernetes", "get_resource", req, json.RawMessage(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}}`))

	obj, err := host.GetResource(req)
	fmt.Println(string(obj), err)
	// Output: {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}} <nil>
}

func ExampleHost_GetResourceInto() {
	h, done := fakeHost()
	defer done()
	req := capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: "team-a", FieldMasks: []string{"metadata.labels"}}
	h.Answer("kubernetes", "get_resource", req, json.RawMessage(`{"metadata":{"name":"team-a","labels":{"cost-center":"cc-42"}}}`))

	var ns struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	err := host.GetResourceInto(req, &ns)
	fmt.Println(ns.Metadata.Labels["cost-center"], err)
	// Output: cc-42 <nil>
}

func ExampleIsNotFound() {
	h, done := fakeHost()
	defer done()
	req := capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: "gone"}
	h.Fail("kubernetes", "get_resource", req, "Cannot find v1/Namespace named 'gone' inside of namespace 'None'")

	_, err := host.GetResource(req)
	fmt.Println(capabilities.IsNotFound(err))
	fmt.Println(err)
	// Output:
	// true
	// kubernetes/get_resource: host error: Callback evaluation failure: Cannot find v1/Namespace named 'gone' inside of namespace 'None'
}

func ExampleIsAccessDenied() {
	deny := func(binding, namespace, operation string, payload []byte) ([]byte, error) {
		return nil, fmt.Errorf("Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported.")
	}
	_, err := capabilities.Host{Call: deny}.GetResource(capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Secret", Name: "s", Namespace: "a"})
	fmt.Println(capabilities.IsAccessDenied(err))
	// Output: true
}

func ExampleHost_ListResourcesByNamespace() {
	h, done := fakeHost()
	defer done()
	req := capabilities.ListResourcesByNamespaceRequest{APIVersion: "v1", Kind: "Service", Namespace: "shop", LabelSelector: "app=web"}
	h.Answer("kubernetes", "list_resources_by_namespace", req,
		json.RawMessage(`{"apiVersion":"v1","kind":"ServiceList","metadata":{},"items":[{"metadata":{"name":"web"}}]}`))

	list, err := host.ListResourcesByNamespace(req)
	fmt.Println(list.Kind, len(list.Items), string(list.Items[0]), err)
	// Output: ServiceList 1 {"metadata":{"name":"web"}} <nil>
}

func ExampleHost_ListAllResources() {
	h, done := fakeHost()
	defer done()
	req := capabilities.ListAllResourcesRequest{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", FieldMasks: []string{"spec.rules.host"}}
	h.Answer("kubernetes", "list_resources_all", req, json.RawMessage(`{"apiVersion":"networking.k8s.io/v1","kind":"IngressList","metadata":{},"items":[
		{"metadata":{"name":"a","namespace":"x"},"spec":{"rules":[{"host":"shop.example.com"}]}}]}`))

	list, _ := host.ListAllResources(req)
	for _, item := range list.Items {
		var ing struct {
			Spec struct {
				Rules []struct{ Host string } `json:"rules"`
			} `json:"spec"`
		}
		json.Unmarshal(item, &ing)
		fmt.Println(ing.Spec.Rules[0].Host)
	}
	// Output: shop.example.com
}

func ExampleHost_CanI() {
	h, done := fakeHost()
	defer done()
	req := capabilities.CanIRequest{SubjectAccessReview: capabilities.SubjectAccessReview{
		User:               "system:serviceaccount:shop:deployer",
		ResourceAttributes: capabilities.ResourceAttributes{Namespace: "shop", Verb: "create", Resource: "pods"},
	}}
	h.Answer("kubernetes", "can_i", req, capabilities.SubjectAccessReviewStatus{Allowed: true})

	status, err := host.CanI(req)
	fmt.Println(status.Allowed, err)
	// Output: true <nil>
}

func ExampleHost_ManifestDigest() {
	h, done := fakeHost()
	defer done()
	h.Answer("oci", "v1/manifest_digest", "busybox:1.36", map[string]string{"digest": "sha256:7a3f"})

	digest, err := host.ManifestDigest("busybox:1.36")
	fmt.Println(digest, err)
	// Output: sha256:7a3f <nil>
}

func ExampleHost_OCIManifest() {
	h, done := fakeHost()
	defer done()
	h.Answer("oci", "v1/oci_manifest", "ghcr.io/org/app:1", json.RawMessage(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`))

	manifest, _ := host.OCIManifest("ghcr.io/org/app:1")
	var m struct{ MediaType string }
	json.Unmarshal(manifest, &m)
	fmt.Println(m.MediaType)
	// Output: application/vnd.oci.image.manifest.v1+json
}

func ExampleHost_OCIManifestConfig() {
	h, done := fakeHost()
	defer done()
	h.Answer("oci", "v1/oci_manifest_config", "ghcr.io/org/app:1",
		json.RawMessage(`{"manifest":{"schemaVersion":2},"digest":"sha256:91c2","config":{"config":{"User":"65532"}}}`))

	mc, _ := host.OCIManifestConfig("ghcr.io/org/app:1")
	var cfg struct{ Config struct{ User string } }
	json.Unmarshal(mc.Config, &cfg)
	fmt.Println(mc.Digest, cfg.Config.User)
	// Output: sha256:91c2 65532
}

func ExampleHost_LookupHost() {
	h, done := fakeHost()
	defer done()
	h.Answer("net", "v1/dns_lookup_host", "registry.internal", map[string][]string{"ips": {"10.0.0.7"}})

	ips, err := host.LookupHost("registry.internal")
	fmt.Println(ips, err)
	// Output: [10.0.0.7] <nil>
}

func ExampleHost_IsCertificateTrusted() {
	h, done := fakeHost()
	defer done()
	req := capabilities.CertificateVerificationRequest{Cert: capabilities.Certificate{Encoding: capabilities.EncodingPEM, Data: []byte("-----BEGIN CERTIFICATE-----...")}}
	h.Answer("crypto", "v1/is_certificate_trusted", req, capabilities.CertificateVerification{Trusted: false, Reason: "Certificate is not trusted by the provided cert chain"})

	v, err := host.IsCertificateTrusted(req)
	fmt.Println(v.Trusted, v.Reason, err)
	// Output: false Certificate is not trusted by the provided cert chain <nil>
}

func ExampleCertificate_MarshalJSON() {
	b, _ := json.Marshal(capabilities.Certificate{Encoding: capabilities.EncodingDER, Data: []byte{48, 130, 1}})
	fmt.Println(string(b))
	// Output: {"encoding":"Der","data":[48,130,1]}
}
