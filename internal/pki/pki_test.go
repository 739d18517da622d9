package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"slices"
	"testing"
	"time"
)

func TestIssueVerifies(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(Template{CommonName: "test CA", Organizations: []string{"o"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || !ca.Cert.MaxPathLenZero || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 || len(ca.Cert.SubjectKeyId) == 0 {
		t.Fatalf("CA: IsCA %v, MaxPathLenZero %v, KeyUsage %b, SKID %x", ca.Cert.IsCA, ca.Cert.MaxPathLenZero, ca.Cert.KeyUsage, ca.Cert.SubjectKeyId)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	srv, err := ca.Issue(Template{CommonName: "svc.ns.svc", Hosts: []string{"svc.ns.svc", "127.0.0.1", "", "::1"}, Usage: ServerAuth,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !srv.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("leaf NotAfter %s, want the CA's %s", srv.Cert.NotAfter, ca.Cert.NotAfter)
	}
	if !slices.Equal(srv.Cert.DNSNames, []string{"svc.ns.svc"}) || len(srv.Cert.IPAddresses) != 2 || !srv.Cert.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("SANs %v %v", srv.Cert.DNSNames, srv.Cert.IPAddresses)
	}
	for _, name := range []string{"svc.ns.svc", "127.0.0.1", "::1"} {
		if _, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if k, ok := srv.Cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", srv.Cert.PublicKey)
	}

	cli, err := ca.Issue(Template{CommonName: "user", Organizations: []string{"system:masters"}, Usage: ClientAuth, Serial: big.NewInt(7),
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if cli.Cert.SerialNumber.Int64() != 7 || cli.Cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("serial %s, O %v", cli.Cert.SerialNumber, cli.Cert.Subject.Organization)
	}
}

func TestKeyPEM(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(Template{CommonName: "ca", NotBefore: now, NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for f, typ := range map[KeyFormat]string{PKCS8: "PRIVATE KEY", SEC1: "EC PRIVATE KEY"} {
		k, err := ca.KeyPEM(f)
		if err != nil {
			t.Fatal(err)
		}
		if blk, _ := pem.Decode(k); blk == nil || blk.Type != typ {
			t.Errorf("format %d: block %v, want %q", f, blk, typ)
		}
		if _, err := tls.X509KeyPair(ca.CertPEM, k); err != nil {
			t.Errorf("format %d: %v", f, err)
		}
		key, err := ParseKeyPEM(k)
		if err != nil || !PublicKeysEqual(key.Public(), ca.Cert.PublicKey) {
			t.Errorf("format %d: ParseKeyPEM: %v", f, err)
		}
	}
	cert, blk, err := ParseCertPEM(append(append([]byte(nil), ca.CertPEM...), ca.CertPEM...))
	if err != nil || !cert.Equal(ca.Cert) || string(blk) != string(ca.CertPEM) {
		t.Errorf("ParseCertPEM: %v", err)
	}
	if _, _, err := ParseCertPEM([]byte("junk")); err == nil {
		t.Error("ParseCertPEM(junk): no error")
	}
}
