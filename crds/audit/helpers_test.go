package audit

import (
	"crypto/x509"
	"encoding/pem"
)

type x509CertPool = x509.CertPool

func newPool() *x509.CertPool { return x509.NewCertPool() }

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
