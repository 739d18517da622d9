package capabilities

import (
	"encoding/json"
	"strconv"
)

// Certificate encodings.
const (
	EncodingPEM = "Pem"
	EncodingDER = "Der"
)

// Certificate is a certificate as crypto/v1/is_certificate_trusted takes it.
// Its JSON is {"encoding":"Pem","data":[45,45,...]}: the bytes as numbers,
// as the host's decoder expects (encoding/json would write base64).
type Certificate struct {
	// Encoding is EncodingPEM or EncodingDER.
	Encoding string
	Data     []byte
}

// MarshalJSON writes the certificate with its data as an array of numbers.
func (c Certificate) MarshalJSON() ([]byte, error) {
	enc, err := json.Marshal(c.Encoding)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 32+4*len(c.Data))
	b = append(b, `{"encoding":`...)
	b = append(b, enc...)
	b = append(b, `,"data":[`...)
	for i, d := range c.Data {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(d), 10)
	}
	return append(b, "]}"...), nil
}

// CertificateVerificationRequest is the payload of
// crypto/v1/is_certificate_trusted.
type CertificateVerificationRequest struct {
	Cert Certificate `json:"cert"`
	// CertChain is the chain to verify against, leaf's issuer first; nil
	// means the host's system roots (sent as absent).
	CertChain []Certificate `json:"cert_chain,omitempty"`
	// NotAfter (RFC 3339) is the time the certificate must still be valid
	// at; empty means now.
	NotAfter string `json:"not_after,omitempty"`
}

// CertificateVerification is the answer of crypto/v1/is_certificate_trusted.
// An untrusted certificate is an answer, not an error: Trusted false, with
// the host's Reason.
type CertificateVerification struct {
	Trusted bool   `json:"trusted"`
	Reason  string `json:"reason"`
}

// IsCertificateTrusted asks the host whether req.Cert is trusted by
// req.CertChain (or the system roots) at req.NotAfter (or now). A
// certificate that does not parse is an error.
func (h Host) IsCertificateTrusted(req CertificateVerificationRequest) (CertificateVerification, error) {
	var answer CertificateVerification
	payload, err := json.Marshal(req)
	if err != nil {
		return answer, err
	}
	raw, err := h.call("crypto", "v1/is_certificate_trusted", payload)
	if err != nil {
		return answer, err
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return answer, decodeError("crypto", "v1/is_certificate_trusted", err)
	}
	return answer, nil
}
