package oci

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/tollgate-dev/tollgate/host/config"
)

// Sources is a sources.yml compiled for the registry client: the hosts
// reached without TLS verification, and a certificate pool per host with the
// system roots plus its source_authorities. The file's format (Kubewarden's:
// insecure_sources, source_authorities) is owned by host/config, whose
// ParseSources reads it; NewSources reads the certificates it names.
//
// Keys are host[:port] exactly as they appear in registry:// URIs.
type Sources struct {
	InsecureSources []string

	pools map[string]*x509.CertPool
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

// ParseSources parses a sources.yml (YAML or JSON, host/config's
// ParseSources) and reads its certificates; name (a file path) is used in
// errors and to resolve relative certificate paths.
func ParseSources(name string, data []byte) (*Sources, error) {
	src, err := config.ParseSources(name, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSources, err)
	}
	return NewSources(name, src, filepath.Dir(name))
}

// NewSources compiles parsed sources: each source_authorities certificate,
// inline PEM or a file (PEM, one or more certificates, or DER; a relative
// path is relative to dir, the working directory when dir is ""), joins the
// system roots of its host. name (the file) is used in errors.
func NewSources(name string, src config.Sources, dir string) (*Sources, error) {
	s := &Sources{InsecureSources: src.InsecureSources, pools: map[string]*x509.CertPool{}}
	for host, certs := range src.SourceAuthorities {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		for i, c := range certs {
			field := fmt.Sprintf("source_authorities.%s[%d]", host, i)
			raw := c.Data
			if c.Path != "" {
				p := c.Path
				if !filepath.IsAbs(p) && dir != "" {
					p = filepath.Join(dir, p)
				}
				if raw, err = os.ReadFile(p); err != nil {
					return nil, fmt.Errorf("%w: %s: field %s: %v", ErrInvalidSources, name, field, err)
				}
			}
			certs, err := parseCertificates(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: field %s: %v", ErrInvalidSources, name, field, err)
			}
			for _, c := range certs {
				pool.AddCert(c)
			}
		}
		s.pools[host] = pool
	}
	return s, nil
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

// CertPool returns the system pool plus the host's source_authorities
// (keyed host:port, else bare host), or nil (use the system pool).
func (s *Sources) CertPool(host string) *x509.CertPool {
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
