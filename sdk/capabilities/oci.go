package capabilities

import "encoding/json"

// ManifestConfig is the answer of oci/v1/oci_manifest_config: an image's
// manifest, its digest and its config, as JSON.
type ManifestConfig struct {
	Manifest json.RawMessage `json:"manifest"`
	Digest   string          `json:"digest"`
	Config   json.RawMessage `json:"config"`
}

// ManifestDigest returns the digest ("sha256:...") of image
// ("ghcr.io/org/app:1", "busybox"); for a multi-platform image, the index's.
func (h Host) ManifestDigest(image string) (string, error) {
	var answer struct {
		Digest string `json:"digest"`
	}
	if err := h.oci("v1/manifest_digest", image, &answer); err != nil {
		return "", err
	}
	return answer.Digest, nil
}

// OCIManifest returns image's manifest (an image manifest or an index) as
// the registry serves it.
func (h Host) OCIManifest(image string) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := h.oci("v1/oci_manifest", image, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// OCIManifestConfig returns image's manifest, digest and config (an index is
// resolved by the host to one platform).
func (h Host) OCIManifestConfig(image string) (ManifestConfig, error) {
	var mc ManifestConfig
	err := h.oci("v1/oci_manifest_config", image, &mc)
	return mc, err
}

// oci sends image as a JSON string, the payload of the oci v1 operations,
// and decodes the answer into v.
func (h Host) oci(operation, image string, v any) error {
	payload, err := json.Marshal(image)
	if err != nil {
		return err
	}
	raw, err := h.call("oci", operation, payload)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return decodeError("oci", operation, err)
	}
	return nil
}
