package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Usage is a leaf certificate's extended key usage.
type Usage int

const (
	// ServerAuth is a TLS server certificate.
	ServerAuth Usage = iota
	// ClientAuth is a TLS client certificate (x509 authentication).
	ClientAuth
)

// KeyFormat is how a private key is PEM-encoded.
type KeyFormat int

const (
	// PKCS8 is a "PRIVATE KEY" block.
	PKCS8 KeyFormat = iota
	// SEC1 is an "EC PRIVATE KEY" block (ECDSA keys only).
	SEC1
)

// Template says what a certificate is for.
type Template struct {
	// CommonName is the subject's CN; Organizations its O (e.g. a client's groups).
	CommonName    string
	Organizations []string
	// Hosts are the subject alternative names: each an IP address or else a DNS name; empty
	// ones are skipped.
	Hosts []string
	// Usage is a leaf's extended key usage (ignored for a CA).
	Usage Usage
	// NotBefore and NotAfter bound the validity; a leaf's NotAfter is cut to its CA's.
	NotBefore, NotAfter time.Time
	// Serial is the serial number; nil for a random one below 2^127.
	Serial *big.Int
}

// Certificate is a certificate and its private key.
type Certificate struct {
	Cert *x509.Certificate
	// CertPEM is Cert as one "CERTIFICATE" PEM block.
	CertPEM []byte
	Key     crypto.Signer
}

// KeyPEM encodes the private key in format f.
func (c *Certificate) KeyPEM(f KeyFormat) ([]byte, error) { return EncodeKey(c.Key, f) }

// CA is a certificate authority: a CA certificate with its key.
type CA struct{ Certificate }

// NewCA makes a self-signed CA with a new ECDSA P-256 key.
func NewCA(t Template) (*CA, error) {
	tmpl, key, err := t.x509()
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLenZero = true, true, true
	c, err := create(tmpl, tmpl, key, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA %q: %w", t.CommonName, err)
	}
	return &CA{*c}, nil
}

// Issue signs a leaf certificate for t with a new ECDSA P-256 key.
func (ca *CA) Issue(t Template) (*Certificate, error) {
	tmpl, key, err := t.x509()
	if err != nil {
		return nil, err
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	switch t.Usage {
	case ClientAuth:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl.AuthorityKeyId = ca.Cert.SubjectKeyId
	c, err := create(tmpl, ca.Cert, key, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate for %q: %w", t.CommonName, err)
	}
	return c, nil
}

// x509 makes a new ECDSA P-256 key and the certificate template t describes for it (subject,
// SANs, validity, serial and subject key identifier; the caller adds the key usages).
func (t Template) x509() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	serial := t.Serial
	if serial == nil {
		if serial, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
			return nil, nil, fmt.Errorf("pki: serial: %w", err)
		}
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	skid := sha1.Sum(der)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: t.CommonName, Organization: t.Organizations},
		NotBefore:    t.NotBefore,
		NotAfter:     t.NotAfter,
		SubjectKeyId: skid[:],
	}
	for _, h := range t.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return tmpl, key, nil
}

func create(tmpl, parent *x509.Certificate, key, signer crypto.Signer) (*Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Certificate{Cert: cert, CertPEM: EncodePEM("CERTIFICATE", der), Key: key}, nil
}

// EncodePEM encodes der as one PEM block of type typ.
func EncodePEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// EncodeKey encodes a private key in format f.
func EncodeKey(key crypto.Signer, f KeyFormat) ([]byte, error) {
	if f == SEC1 {
		ec, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("pki: SEC1 encoding of a %T", key)
		}
		der, err := x509.MarshalECPrivateKey(ec)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		return EncodePEM("EC PRIVATE KEY", der), nil
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return EncodePEM("PRIVATE KEY", der), nil
}

// ParseCertPEM parses the first PEM block of b, which must be a certificate, and returns it
// with that block alone re-encoded.
func ParseCertPEM(b []byte) (*x509.Certificate, []byte, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, pem.EncodeToMemory(blk), nil
}

// ParseKeyPEM parses a PEM private key: PKCS#8, SEC1 (EC) or PKCS#1 (RSA).
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, errors.New("unsupported key type")
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("unsupported private key encoding")
}

// PublicKeysEqual says whether a and b are the same public key.
func PublicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}
