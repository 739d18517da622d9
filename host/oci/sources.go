package oci

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Sources is the content of a sources.yml (or .yaml/.json) file, in
// Kubewarden's format:
//
//	insecure_sources: ["127.0.0.1:5000"]       # plain HTTP or untrusted TLS allowed
//	source_authorities:
//	  "registry.example.com:5500":
//	    - type: Path
//	      path: /etc/pki/ca.pem                  # PEM or DER
//	    - type: Data
//	      data: |
//	        -----BEGIN CERTIFICATE-----
//	        ...
//
// Keys are host[:port] exactly as they appear in registry:// URIs.
type Sources struct {
	InsecureSources   []string                     `json:"insecure_sources,omitempty"`
	SourceAuthorities map[string][]SourceAuthority `json:"source_authorities,omitempty"`

	pools map[string]*x509.CertPool
}

// SourceAuthority is one CA certificate for a host: Type "Path" with Path,
// or Type "Data" with Data (PEM).
type SourceAuthority struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
	Data string `json:"data,omitempty"`
}

// DefaultSourcesPath is where sources.yaml is read from when no path is
// given: $XDG_CONFIG_HOME/tollgate/sources.yaml (it need not exist).
func DefaultSourcesPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "tollgate", "sources.yaml")
}

// LoadSources reads and validates a sources file. An empty path means
// DefaultSourcesPath, which may be missing (then no sources apply); an
// explicit path must exist.
func LoadSources(path string) (*Sources, error) {
	explicit := path != ""
	if !explicit {
		path = DefaultSourcesPath()
		if path == "" {
			return &Sources{}, nil
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return &Sources{}, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidSources, err)
	}
	return ParseSources(path, data)
}

// ParseSources parses sources YAML or JSON; name (a file path) is used in
// errors and to resolve relative certificate paths.
func ParseSources(name string, data []byte) (*Sources, error) {
	var s Sources
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidSources, name, err)
	}
	if err := s.compile(name); err != nil {
		return nil, err
	}
	return &s, nil
}

// NewSources builds Sources from already-parsed values (for a caller that
// reads sources.yml itself, such as the policy server's configuration).
// Relative certificate paths are relative to the working directory.
func NewSources(insecure []string, authorities map[string][]SourceAuthority) (*Sources, error) {
	s := &Sources{InsecureSources: insecure, SourceAuthorities: authorities}
	if err := s.compile("sources"); err != nil {
		return nil, err
	}
	return s, nil
}

// UnmarshalJSON also accepts Kubewarden's older plain-string form: PEM
// data when it starts with -----BEGIN, else a path.
func (a *SourceAuthority) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		if strings.HasPrefix(strings.TrimSpace(str), "-----BEGIN") {
			*a = SourceAuthority{Type: "Data", Data: str}
		} else {
			*a = SourceAuthority{Type: "Path", Path: str}
		}
		return nil
	}
	type plain SourceAuthority
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode((*plain)(a))
}

func (s *Sources) compile(name string) error {
	for i, h := range s.InsecureSources {
		if err := validHost(h); err != nil {
			return fmt.Errorf("%w: %s: insecure_sources[%d]: %v", ErrInvalidSources, name, i, err)
		}
	}
	s.pools = map[string]*x509.CertPool{}
	for host, auths := range s.SourceAuthorities {
		if err := validHost(host); err != nil {
			return fmt.Errorf("%w: %s: source_authorities: %v", ErrInvalidSources, name, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		for i, a := range auths {
			field := fmt.Sprintf("source_authorities[%q][%d]", host, i)
			var raw []byte
			switch a.Type {
			case "Path":
				if a.Path == "" {
					return fmt.Errorf("%w: %s: %s: type Path needs a path", ErrInvalidSources, name, field)
				}
				p := a.Path
				if !filepath.IsAbs(p) {
					p = filepath.Join(filepath.Dir(name), p)
				}
				if raw, err = os.ReadFile(p); err != nil {
					return fmt.Errorf("%w: %s: %s: %v", ErrInvalidSources, name, field, err)
				}
			case "Data":
				if a.Data == "" {
					return fmt.Errorf("%w: %s: %s: type Data needs data", ErrInvalidSources, name, field)
				}
				raw = []byte(a.Data)
			default:
				return fmt.Errorf("%w: %s: %s: type %q: want Path or Data", ErrInvalidSources, name, field, a.Type)
			}
			certs, err := parseCertificates(raw)
			if err != nil {
				return fmt.Errorf("%w: %s: %s: %v", ErrInvalidSources, name, field, err)
			}
			for _, c := range certs {
				pool.AddCert(c)
			}
		}
		s.pools[host] = pool
	}
	return nil
}

func validHost(h string) error {
	if h == "" || strings.ContainsAny(h, "/ \t") || strings.Contains(h, "://") {
		return fmt.Errorf("%q is not host[:port]", h)
	}
	return nil
}

// parseCertificates accepts one or more PEM certificates, or one DER certificate.
func parseCertificates(raw []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := raw
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("bad PEM certificate: %v", err)
		}
		certs = append(certs, c)
	}
	if len(certs) > 0 {
		return certs, nil
	}
	c, err := x509.ParseCertificate(raw)
	if err != nil {
		return nil, errors.New("no PEM CERTIFICATE block and not a DER certificate")
	}
	return []*x509.Certificate{c}, nil
}

// IsInsecure reports whether host (host[:port]) is listed in
// insecure_sources, as host:port or as the bare host name (any port).
func (s *Sources) IsInsecure(host string) bool {
	if s == nil {
		return false
	}
	for _, k := range candidates(host) {
		if slices.Contains(s.InsecureSources, k) {
			return true
		}
	}
	return false
}

// certPool returns the system pool plus the host's source_authorities
// (keyed host:port, else bare host), or nil (use the system pool).
func (s *Sources) certPool(host string) *x509.CertPool {
	if s == nil {
		return nil
	}
	for _, k := range candidates(host) {
		if p := s.pools[k]; p != nil {
			return p
		}
	}
	return nil
}

// candidates are the sources.yml keys that apply to host[:port], most specific first.
func candidates(host string) []string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return []string{host, h}
	}
	return []string{host}
}
