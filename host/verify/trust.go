package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tuf"
)

// ErrTrustRoot: the Sigstore trust root could not be loaded. Keyless
// verification fails closed without it.
var ErrTrustRoot = errors.New("sigstore trust root unavailable")

// clientTrustConfigMediaType prefixes a Sigstore ClientTrustConfig's media type.
const clientTrustConfigMediaType = "application/vnd.dev.sigstore.clienttrustconfig"

// LoadTrustRoot reads a Sigstore trust root file: a ClientTrustConfig
// (`cosign trusted-root create` plus a signing config; only trustedRoot is
// used) or a bare trusted_root.json. It is taken as it is, without TUF.
func LoadTrustRoot(path string) (*root.TrustedRoot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTrustRoot, err)
	}
	return ParseTrustRoot(path, b)
}

// ParseTrustRoot parses what LoadTrustRoot reads; name prefixes errors.
func ParseTrustRoot(name string, b []byte) (*root.TrustedRoot, error) {
	var head struct {
		MediaType   string          `json:"mediaType"`
		TrustedRoot json.RawMessage `json:"trustedRoot"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: %s: not JSON: %v", ErrTrustRoot, name, err)
	}
	if strings.HasPrefix(head.MediaType, clientTrustConfigMediaType) {
		if len(head.TrustedRoot) == 0 {
			return nil, fmt.Errorf("%w: %s: ClientTrustConfig without trustedRoot", ErrTrustRoot, name)
		}
		b = head.TrustedRoot
	}
	tr, err := root.NewTrustedRootFromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a Sigstore trusted root or ClientTrustConfig: %v", ErrTrustRoot, name, err)
	}
	if len(tr.FulcioCertificateAuthorities()) == 0 {
		return nil, fmt.Errorf("%w: %s: no certificateAuthorities: keyless signatures could never verify", ErrTrustRoot, name)
	}
	if len(tr.RekorLogs()) == 0 {
		return nil, fmt.Errorf("%w: %s: no tlogs: keyless signatures could never verify", ErrTrustRoot, name)
	}
	return tr, nil
}

// FetchPublicGood fetches the public-good Sigstore trusted root through
// Sigstore's TUF repository (sigstore-go's embedded TUF root, cached under
// cacheDir, "" = ~/.sigstore/root). It needs the network on first use.
func FetchPublicGood(cacheDir string) (*root.TrustedRoot, error) {
	return FetchTUF(tuf.DefaultMirror, cacheDir)
}

// FetchTUF fetches trusted_root.json from a TUF repository that Sigstore's
// TUF root (embedded in sigstore-go) signs: Sigstore's or a mirror of it.
func FetchTUF(mirror, cacheDir string) (*root.TrustedRoot, error) {
	opts := tuf.DefaultOptions()
	opts.RepositoryBaseURL = mirror
	if cacheDir != "" {
		opts.CachePath = cacheDir
	}
	tr, err := root.FetchTrustedRootWithOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: the public-good root from Sigstore's TUF repository %s: %v (offline? give a trusted root or ClientTrustConfig file instead)",
			ErrTrustRoot, opts.RepositoryBaseURL, err)
	}
	return tr, nil
}
