package capabilities

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// The request types below are Kubewarden's host-call payloads (policy-sdk-rust
// host_capabilities), with the field names and order of policy-evaluator's
// CallbackRequestType, the variant a kwctl session records.

// GetResourceRequest is kubernetes/get_resource (tag KubernetesGetResource).
type GetResourceRequest struct {
	APIVersion   string    `json:"api_version" yaml:"api_version"`
	Kind         string    `json:"kind" yaml:"kind"`
	Name         string    `json:"name" yaml:"name"`
	Namespace    *string   `json:"namespace" yaml:"namespace"`
	DisableCache bool      `json:"disable_cache" yaml:"disable_cache"`
	FieldMasks   *[]string `json:"field_masks" yaml:"field_masks"`
}

// ListByNamespaceRequest is kubernetes/list_resources_by_namespace
// (tag KubernetesListResourceNamespace).
type ListByNamespaceRequest struct {
	APIVersion    string    `json:"api_version" yaml:"api_version"`
	Kind          string    `json:"kind" yaml:"kind"`
	Namespace     string    `json:"namespace" yaml:"namespace"`
	LabelSelector *string   `json:"label_selector" yaml:"label_selector"`
	FieldSelector *string   `json:"field_selector" yaml:"field_selector"`
	DisableCache  bool      `json:"disable_cache" yaml:"disable_cache"`
	FieldMasks    *[]string `json:"field_masks" yaml:"field_masks"`
}

// ListAllRequest is kubernetes/list_resources_all (tag KubernetesListResourceAll).
type ListAllRequest struct {
	APIVersion    string    `json:"api_version" yaml:"api_version"`
	Kind          string    `json:"kind" yaml:"kind"`
	LabelSelector *string   `json:"label_selector" yaml:"label_selector"`
	FieldSelector *string   `json:"field_selector" yaml:"field_selector"`
	DisableCache  bool      `json:"disable_cache" yaml:"disable_cache"`
	FieldMasks    *[]string `json:"field_masks" yaml:"field_masks"`
}

// PluralNameRequest asks the plural name of a kind (tag
// KubernetesGetResourcePluralName). It is no host call a policy makes: the
// host asks it to build a context-aware Rego policy's data.kubernetes, and a
// kwctl session records it after the lists (see Cluster).
type PluralNameRequest struct {
	APIVersion string `json:"api_version" yaml:"api_version"`
	Kind       string `json:"kind" yaml:"kind"`
}

// CanIRequest is kubernetes/can_i (tag KubernetesCanI).
type CanIRequest struct {
	Request      SubjectAccessReview `json:"request" yaml:"request"`
	DisableCache bool                `json:"disable_cache" yaml:"disable_cache"`
}

// SubjectAccessReview is the can_i question.
type SubjectAccessReview struct {
	Groups             *[]string          `json:"groups" yaml:"groups"`
	ResourceAttributes ResourceAttributes `json:"resource_attributes" yaml:"resource_attributes"`
	User               string             `json:"user" yaml:"user"`
}

// ResourceAttributes are a SubjectAccessReview's resource attributes.
type ResourceAttributes struct {
	Group       *string `json:"group" yaml:"group"`
	Name        *string `json:"name" yaml:"name"`
	Namespace   *string `json:"namespace" yaml:"namespace"`
	Resource    string  `json:"resource" yaml:"resource"`
	Subresource *string `json:"subresource" yaml:"subresource"`
	Verb        string  `json:"verb" yaml:"verb"`
	Version     *string `json:"version" yaml:"version"`
}

// CertificateRequest is crypto/v1/is_certificate_trusted (tag CryptoIsCertificateTrusted).
type CertificateRequest struct {
	Request CertificateVerification `json:"request" yaml:"request"`
}

// CertificateVerification is the crypto payload.
type CertificateVerification struct {
	Cert      Certificate    `json:"cert" yaml:"cert"`
	CertChain *[]Certificate `json:"cert_chain" yaml:"cert_chain"`
	NotAfter  *string        `json:"not_after" yaml:"not_after"`
}

// Certificate is a PEM or DER certificate; Data is bytes as JSON integers.
type Certificate struct {
	Encoding string `json:"encoding" yaml:"encoding"`
	Data     []int  `json:"data" yaml:"data"`
}

// imageRequest is oci/v1/manifest_digest, oci_manifest and oci_manifest_config.
type imageRequest struct {
	Image string `json:"image" yaml:"image"`
}

// dnsRequest is net/v1/dns_lookup_host (tag DNSLookupHost).
type dnsRequest struct {
	Host string `json:"host" yaml:"host"`
}

// verifyRequest is oci/v1/verify or oci/v2/verify: kept as decoded, so that a
// session can replay it although tollgate does not verify signatures yet.
type verifyRequest struct {
	fields map[string]any
}

// request is a decoded host call: its session tag and its typed value.
type request struct {
	tag   string
	value any
}

// resource is the kind a kubernetes get/list reads (for the allow-list).
func (r *request) resource() (Resource, bool) {
	switch v := r.value.(type) {
	case *GetResourceRequest:
		return Resource{v.APIVersion, v.Kind}, true
	case *ListByNamespaceRequest:
		return Resource{v.APIVersion, v.Kind}, true
	case *ListAllRequest:
		return Resource{v.APIVersion, v.Kind}, true
	}
	return Resource{}, false
}

// the 11 gated capabilities, as "<namespace>/<operation>".
var capabilityPaths = []string{
	"kubernetes/get_resource", "kubernetes/list_resources_by_namespace", "kubernetes/list_resources_all", "kubernetes/can_i",
	"oci/v1/manifest_digest", "oci/v1/oci_manifest", "oci/v1/oci_manifest_config", "oci/v1/verify", "oci/v2/verify",
	"net/v1/dns_lookup_host", "crypto/v1/is_certificate_trusted",
}

// capabilityLabel is the metric label of a call to path ("<namespace>/<operation>"):
// the capability path, or "unknown" (bounded cardinality).
func capabilityLabel(p string) string {
	for _, c := range capabilityPaths {
		if c == p {
			return c
		}
	}
	return "unknown"
}

// ociTags are the session tags of the oci/v1 manifest operations, and
// ociCapabilities the capability path of each tag (built once, not per call).
var (
	ociTags = map[string]string{"v1/manifest_digest": "OciManifestDigest", "v1/oci_manifest": "OciManifest",
		"v1/oci_manifest_config": "OciManifestAndConfig"}
	ociCapabilities = map[string]string{"OciManifestDigest": "oci/v1/manifest_digest", "OciManifest": "oci/v1/oci_manifest",
		"OciManifestAndConfig": "oci/v1/oci_manifest_config"}
)

// decode parses a payload the way policy-evaluator does (unknown operation
// and namespace errors included).
func decode(namespace, operation string, payload []byte) (*request, error) {
	switch namespace {
	case "kubernetes":
		switch operation {
		case "get_resource", "list_resources_by_namespace", "list_resources_all":
			return decodeKube(operation, payload)
		case "can_i":
			return decodeCanI(payload)
		}
	case "oci":
		switch operation {
		case "v1/manifest_digest", "v1/oci_manifest", "v1/oci_manifest_config":
			var s string
			if err := json.Unmarshal(payload, &s); err != nil {
				return nil, payloadError(err)
			}
			return &request{ociTags[operation], &imageRequest{Image: s}}, nil
		case "v1/verify", "v2/verify":
			return decodeVerify(operation, payload)
		}
	case "net":
		if operation == "v1/dns_lookup_host" {
			var s string
			if err := json.Unmarshal(payload, &s); err != nil {
				return nil, payloadError(err)
			}
			return &request{"DNSLookupHost", &dnsRequest{Host: s}}, nil
		}
	case "crypto":
		if operation == "v1/is_certificate_trusted" {
			v := &CertificateRequest{}
			if err := strictJSON(payload, &v.Request, "cert"); err != nil {
				return nil, err
			}
			return &request{"CryptoIsCertificateTrusted", v}, nil
		}
	default:
		return nil, errorf("unknown namespace: %s", namespace)
	}
	return nil, errorf("unknown operation: %s", operation)
}

// kubeWire is the union of the kubernetes get and list payloads, decoded in
// one pass; pointers tell absent fields from zero values.
type kubeWire struct {
	APIVersion    *string   `json:"api_version"`
	Kind          *string   `json:"kind"`
	Name          *string   `json:"name"`
	Namespace     *string   `json:"namespace"`
	LabelSelector *string   `json:"label_selector"`
	FieldSelector *string   `json:"field_selector"`
	DisableCache  *bool     `json:"disable_cache"`
	FieldMasks    *[]string `json:"field_masks"`
}

// decodeKube decodes get_resource and the lists (the hot path: one JSON pass),
// requiring what serde requires.
func decodeKube(operation string, payload []byte) (*request, error) {
	var w kubeWire
	if err := json.Unmarshal(payload, &w); err != nil {
		return nil, payloadError(err)
	}
	required := func(names ...string) error {
		for _, n := range names {
			var missing bool
			switch n {
			case "api_version":
				missing = w.APIVersion == nil
			case "kind":
				missing = w.Kind == nil
			case "name":
				missing = w.Name == nil
			case "namespace":
				missing = w.Namespace == nil
			case "disable_cache":
				missing = w.DisableCache == nil
			}
			if missing {
				return errorf("missing field `%s`", n)
			}
		}
		return nil
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	dc := w.DisableCache != nil && *w.DisableCache
	switch operation {
	case "get_resource":
		if err := required("api_version", "kind", "name", "disable_cache"); err != nil {
			return nil, err
		}
		return &request{"KubernetesGetResource", &GetResourceRequest{APIVersion: *w.APIVersion, Kind: *w.Kind, Name: *w.Name,
			Namespace: w.Namespace, DisableCache: dc, FieldMasks: w.FieldMasks}}, nil
	case "list_resources_by_namespace":
		if err := required("api_version", "kind", "namespace"); err != nil {
			return nil, err
		}
		return &request{"KubernetesListResourceNamespace", &ListByNamespaceRequest{APIVersion: *w.APIVersion, Kind: *w.Kind,
			Namespace: str(w.Namespace), LabelSelector: w.LabelSelector, FieldSelector: w.FieldSelector, DisableCache: dc, FieldMasks: w.FieldMasks}}, nil
	default:
		if err := required("api_version", "kind"); err != nil {
			return nil, err
		}
		return &request{"KubernetesListResourceAll", &ListAllRequest{APIVersion: *w.APIVersion, Kind: *w.Kind,
			LabelSelector: w.LabelSelector, FieldSelector: w.FieldSelector, DisableCache: dc, FieldMasks: w.FieldMasks}}, nil
	}
}

func payloadError(err error) error {
	return errorf("invalid host call payload: %v", err)
}

// strictJSON decodes a JSON object into v, requiring the given fields (as
// serde does for non-Option fields without a default).
func strictJSON(payload []byte, v any, required ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return payloadError(err)
	}
	for _, f := range required {
		if _, ok := m[f]; !ok {
			return errorf("missing field `%s`", f)
		}
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return payloadError(err)
	}
	return nil
}

// decodeCanI accepts resource_attributes (Rust SDK) and resourceAttributes
// (policy-sdk-go sends the camelCase name).
func decodeCanI(payload []byte) (*request, error) {
	var p struct {
		SAR map[string]json.RawMessage `json:"subject_access_review"`
	}
	if err := strictJSON(payload, &p, "subject_access_review", "disable_cache"); err != nil {
		return nil, err
	}
	var dc struct {
		DisableCache bool `json:"disable_cache"`
	}
	if err := json.Unmarshal(payload, &dc); err != nil {
		return nil, payloadError(err)
	}
	if ra, ok := p.SAR["resourceAttributes"]; ok {
		if _, snake := p.SAR["resource_attributes"]; !snake {
			p.SAR["resource_attributes"] = ra
		}
		delete(p.SAR, "resourceAttributes")
	}
	b, _ := json.Marshal(p.SAR)
	v := &CanIRequest{DisableCache: dc.DisableCache}
	if err := strictJSON(b, &v.Request, "resource_attributes", "user"); err != nil {
		return nil, err
	}
	ra, _ := json.Marshal(p.SAR["resource_attributes"])
	if err := strictJSON(ra, &v.Request.ResourceAttributes, "resource", "verb"); err != nil {
		return nil, err
	}
	return &request{"KubernetesCanI", v}, nil
}

// verifyVariants are the signature verification variants a verify call may name.
var verifyVariants = map[string]bool{"SigstorePubKeyVerify": true, "SigstoreKeylessVerify": true,
	"SigstoreKeylessPrefixVerify": true, "SigstoreGithubActionsVerify": true, "SigstoreCertificateVerify": true}

// decodeVerify: v1 is externally tagged ({"SigstorePubKeyVerify": {...}}),
// v2 internally ({"type": "SigstorePubKeyVerify", ...}).
func decodeVerify(operation string, payload []byte) (*request, error) {
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, payloadError(err)
	}
	if operation == "v1/verify" {
		if len(m) != 1 {
			return nil, errorf("invalid host call payload: want an object with one variant key")
		}
		for k, v := range m {
			inner, ok := v.(map[string]any)
			if !verifyVariants[k] || !ok {
				return nil, errorf("unknown variant `%s`", k)
			}
			return &request{k, &verifyRequest{inner}}, nil
		}
	}
	t, _ := m["type"].(string)
	if !verifyVariants[t] {
		return nil, errorf("unknown variant `%s`", t)
	}
	delete(m, "type")
	return &request{t, &verifyRequest{m}}, nil
}

// fields is the request's value as generic JSON, normalized for comparison:
// null and absent are the same, field_masks is a set, a list's
// disable_cache defaults to false.
func (r *request) fields() map[string]any {
	var src any = r.value
	if v, ok := r.value.(*verifyRequest); ok {
		src = v.fields
	}
	b, _ := json.Marshal(src)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return normalize(r.tag, m)
}

func normalize(tag string, m map[string]any) map[string]any {
	dropNulls(m)
	if fm, ok := m["field_masks"].([]any); ok {
		sort.Slice(fm, func(i, j int) bool { return fmt.Sprint(fm[i]) < fmt.Sprint(fm[j]) })
	}
	if strings.HasPrefix(tag, "KubernetesList") && m["disable_cache"] == false {
		delete(m, "disable_cache")
	}
	return m
}

func dropNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			dropNulls(x)
		}
	case []any:
		for _, x := range t {
			dropNulls(x)
		}
	}
}

// same reports whether two requests are equal by value.
func sameRequest(tagA string, a map[string]any, tagB string, b map[string]any) bool {
	return tagA == tagB && reflect.DeepEqual(a, b)
}

// describe is a request as a reader sees it: Tag {json}.
func describe(tag string, fields map[string]any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(fields)
	return tag + " " + strings.TrimSpace(buf.String())
}
