package cluster

import (
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/pki"
)

// CA is a throw-away certificate authority for tests: it signs the apiserver's serving
// certificate, and tests use it for webhook servers (a certificate for <svc>.<ns>.svc).
type CA struct {
	// CertPEM is the CA certificate, e.g. a webhook's caBundle.
	CertPEM []byte
	ca      *pki.CA
}

// certValidity is how long the CA and every certificate it issues are valid (from an hour ago).
const certValidity = 24 * time.Hour

// NewCA creates a CA valid for a day.
func NewCA(commonName string) (*CA, error) {
	now := time.Now()
	ca, err := pki.NewCA(pki.Template{CommonName: commonName, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity)})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &CA{CertPEM: ca.CertPEM, ca: ca}, nil
}

// ServingCert issues a server certificate for hosts (DNS names or IP addresses; the first is also
// the common name) and returns it and its key, PEM-encoded.
func (ca *CA) ServingCert(hosts ...string) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, fmt.Errorf("cluster: serving certificate: no hosts")
	}
	return ca.issue(pki.Template{CommonName: hosts[0], Hosts: hosts, Usage: pki.ServerAuth})
}

// ClientCert issues a client certificate for user cn in groups orgs (x509 authentication: the
// common name is the user, the organizations its groups) and returns it and its key, PEM-encoded.
func (ca *CA) ClientCert(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pki.Template{CommonName: cn, Organizations: orgs, Usage: pki.ClientAuth})
}

// issue signs t, valid for a day, and returns the certificate and its PKCS#8 key.
func (ca *CA) issue(t pki.Template) (certPEM, keyPEM []byte, err error) {
	now := time.Now()
	t.NotBefore, t.NotAfter = now.Add(-time.Hour), now.Add(certValidity)
	crt, err := ca.ca.Issue(t)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	if keyPEM, err = crt.KeyPEM(pki.PKCS8); err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	return crt.CertPEM, keyPEM, nil
}

func pemBlock(typ string, der []byte) []byte { return pki.EncodePEM(typ, der) }
