package capabilities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// OCIClient is what the oci capability needs from a registry client
// (host/oci's *Client implements it).
type OCIClient interface {
	ImageDigest(ctx context.Context, image string) (string, error)
	ImageManifest(ctx context.Context, image string) (mediaType, digest string, raw []byte, err error)
	ImageManifestAndConfig(ctx context.Context, image string) (manifest []byte, digest string, config []byte, err error)
}

// oci answers the three oci/v1 manifest calls; successes are kept 60 s per
// image, as Kubewarden does.
func (h *Host) oci(ctx context.Context, tag, image string) ([]byte, error) {
	if h.o.OCI == nil {
		return nil, errors.New("no OCI registry client is configured")
	}
	key := tag + "\x00" + image
	capName := ociCapabilities[tag]
	if b, ok := h.ociTTL.get(key); ok {
		h.m.cache(ctx, capName, "hit")
		return b, nil
	}
	h.m.cache(ctx, capName, "miss")
	var out []byte
	switch tag {
	case "OciManifestDigest":
		d, err := h.o.OCI.ImageDigest(ctx, image)
		if err != nil {
			return nil, err
		}
		out, _ = json.Marshal(map[string]string{"digest": d})
	case "OciManifest":
		_, _, raw, err := h.o.OCI.ImageManifest(ctx, image)
		if err != nil {
			return nil, err
		}
		out = raw
	case "OciManifestAndConfig":
		m, d, c, err := h.o.OCI.ImageManifestAndConfig(ctx, image)
		if err != nil {
			return nil, err
		}
		if !json.Valid(m) || !json.Valid(c) {
			return nil, fmt.Errorf("the manifest or config of %s is not JSON", image)
		}
		var buf bytes.Buffer
		buf.WriteString(`{"manifest":`)
		buf.Write(bytes.TrimSpace(m))
		buf.WriteString(`,"digest":`)
		writeJSON(&buf, d)
		buf.WriteString(`,"config":`)
		buf.Write(bytes.TrimSpace(c))
		buf.WriteString("}")
		out = buf.Bytes()
	default:
		return nil, fmt.Errorf("no handler for %s", tag)
	}
	h.ociTTL.put(key, slices.Clone(out))
	return out, nil
}

// dnsLookup answers net/v1/dns_lookup_host: {"ips": [...]} (uncached).
func (h *Host) dnsLookup(ctx context.Context, host string) ([]byte, error) {
	ips, err := h.resolve.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	if ips == nil {
		ips = []string{}
	}
	return json.Marshal(map[string][]string{"ips": ips})
}
