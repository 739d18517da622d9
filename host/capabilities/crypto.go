package capabilities

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// Kubewarden's reasons (policy-evaluator callback_handler/crypto.rs).
const (
	reasonExpired    = "Certificate is being used after its expiration date"
	reasonNotYet     = "Certificate is being used before its validity date"
	reasonNotByChain = "Certificate is not trusted by the provided cert chain"
)

// certificateTrusted answers crypto/v1/is_certificate_trusted. Untrusted is a
// success with a reason; a certificate that does not parse, or a not_after
// that is not RFC 3339, is an error.
func (h *Host) certificateTrusted(req CertificateVerification) ([]byte, error) {
	cert, err := parseCert(req.Cert)
	if err != nil {
		return nil, err
	}
	at := h.o.Now()
	if req.NotAfter != nil && *req.NotAfter != "" {
		if at, err = time.Parse(time.RFC3339, *req.NotAfter); err != nil {
			return nil, fmt.Errorf("Timestamp not_after is not in RFC3339 format: %v", err)
		}
	}
	answer := func(ok bool, reason string) ([]byte, error) {
		return json.Marshal(struct {
			Trusted bool   `json:"trusted"`
			Reason  string `json:"reason"`
		}{ok, reason})
	}
	if at.After(cert.NotAfter) {
		return answer(false, reasonExpired)
	}
	if at.Before(cert.NotBefore) {
		return answer(false, reasonNotYet)
	}
	opts := x509.VerifyOptions{CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if req.CertChain != nil {
		opts.Roots, opts.Intermediates = x509.NewCertPool(), x509.NewCertPool()
		opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}
		for i, c := range *req.CertChain {
			cc, err := parseCert(c)
			if err != nil {
				return nil, fmt.Errorf("cert_chain[%d]: %w", i, err)
			}
			if isSelfSigned(cc) {
				opts.Roots.AddCert(cc)
			} else {
				opts.Intermediates.AddCert(cc)
			}
		}
	}
	if _, err := cert.Verify(opts); err != nil {
		var ua x509.UnknownAuthorityError
		if req.CertChain != nil && errors.As(err, &ua) {
			return answer(false, reasonNotByChain)
		}
		return answer(false, "Certificate not trusted: "+err.Error())
	}
	return answer(true, "")
}

func isSelfSigned(c *x509.Certificate) bool {
	return c.CheckSignatureFrom(c) == nil
}

func parseCert(c Certificate) (*x509.Certificate, error) {
	data := make([]byte, len(c.Data))
	for i, v := range c.Data {
		if v < 0 || v > 255 {
			return nil, fmt.Errorf("certificate data: %d at %d is not a byte", v, i)
		}
		data[i] = byte(v)
	}
	switch c.Encoding {
	case "Pem":
		b, _ := pem.Decode(data)
		if b == nil {
			return nil, errors.New("Certificate PEM data is not valid: no PEM block found")
		}
		data = b.Bytes
	case "Der":
	default:
		return nil, fmt.Errorf("unknown variant `%s`, expected `Pem` or `Der`", c.Encoding)
	}
	cert, err := x509.ParseCertificate(data)
	if err != nil {
		return nil, fmt.Errorf("Certificate is not valid: %w", err)
	}
	return cert, nil
}
