package capabilities

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

func makeCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key, der
}

func wireCert(encoding string, b []byte) Certificate {
	c := Certificate{Encoding: encoding, Data: make([]int, len(b))}
	for i, x := range b {
		c.Data[i] = int(x)
	}
	return c
}

func TestIsCertificateTrusted(t *testing.T) {
	now := time.Now()
	ca, caKey, caDER := makeCert(t, "ca", nil, nil, true, now.Add(-time.Hour), now.Add(24*time.Hour))
	_, _, otherDER := makeCert(t, "other-ca", nil, nil, true, now.Add(-time.Hour), now.Add(24*time.Hour))
	_, _, leafDER := makeCert(t, "leaf", ca, caKey, false, now.Add(-time.Hour), now.Add(2*time.Hour))
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	str := func(s string) *string { return &s }
	chain := func(cs ...Certificate) *[]Certificate { return &cs }

	f := newTestHost(t, Options{}, Allow{})
	tests := []struct {
		name    string
		req     CertificateVerification
		want    string
		wantErr string
	}{
		{"trusted by the chain (PEM)", CertificateVerification{Cert: wireCert("Pem", leafPEM), CertChain: chain(wireCert("Pem", caPEM))},
			`{"trusted":true,"reason":""}`, ""},
		{"trusted by the chain (DER)", CertificateVerification{Cert: wireCert("Der", leafDER), CertChain: chain(wireCert("Der", caDER)), NotAfter: str("")},
			`{"trusted":true,"reason":""}`, ""},
		{"another chain", CertificateVerification{Cert: wireCert("Pem", leafPEM), CertChain: chain(wireCert("Der", otherDER))},
			`{"trusted":false,"reason":"Certificate is not trusted by the provided cert chain"}`, ""},
		{"expired at not_after", CertificateVerification{Cert: wireCert("Pem", leafPEM), CertChain: chain(wireCert("Pem", caPEM)),
			NotAfter: str(now.Add(3 * time.Hour).UTC().Format(time.RFC3339))},
			`{"trusted":false,"reason":"Certificate is being used after its expiration date"}`, ""},
		{"not valid yet", CertificateVerification{Cert: wireCert("Pem", leafPEM), NotAfter: str(now.Add(-2 * time.Hour).UTC().Format(time.RFC3339))},
			`{"trusted":false,"reason":"Certificate is being used before its validity date"}`, ""},
		{"bad PEM", CertificateVerification{Cert: wireCert("Pem", []byte("nope"))}, "",
			"Callback evaluation failure: Certificate PEM data is not valid: no PEM block found"},
		{"bad not_after", CertificateVerification{Cert: wireCert("Pem", leafPEM), NotAfter: str("yesterday")}, "",
			`Callback evaluation failure: Timestamp not_after is not in RFC3339 format`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := json.Marshal(tt.req)
			got, err := call(t, f, "crypto", "v1/is_certificate_trusted", string(p))
			if tt.wantErr != "" {
				wantErrContains(t, err, tt.wantErr)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	// no chain: the system roots, which do not know this CA
	p, _ := json.Marshal(CertificateVerification{Cert: wireCert("Pem", leafPEM)})
	got, err := call(t, f, "crypto", "v1/is_certificate_trusted", string(p))
	if err != nil || compactJSON(t, got) == `{"reason":"","trusted":true}` {
		t.Fatalf("self-made leaf trusted by system roots: %s, %v", got, err)
	}
}
