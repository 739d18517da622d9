package operator

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// CACreatedAnnotation on the CA Secret records when the CA in ca.crt was made (RFC 3339): it
// signs server certificates only CAPropagationDelay later, once every caBundle trusts it.
const CACreatedAnnotation = "tollgate.dev/ca-created-at"

// ErrCA reports a CA Secret the controller cannot use or write.
var ErrCA = errors.New("CA secret")

// certSkew backdates every certificate's NotBefore, for clocks that run a little behind.
const certSkew = 5 * time.Minute

// CertManager keeps the CA that signs policy server certificates, in the Secret o.CASecret of
// o.Namespace (keys ca.crt, ca.key and old-ca.crt; created when missing), and issues the
// servers' certificates.
//
// Rotation: a CA that expires within o.RenewBefore is replaced; the old one stays in old-ca.crt,
// and so in CABundle, until it expires. A new CA that replaced another signs certificates only
// after it has been in the Secret for o.CAPropagationDelay, so that the webhooks' caBundle trust
// it first; meanwhile a still valid certificate of the old CA is kept.
//
// How others learn of a CA change: every change is a write of the CA Secret (there is no other
// notification). The PolicyServer reconciler watches that Secret and re-reconciles every
// PolicyServer; the policy reconcilers watch it too and rewrite their webhooks' caBundle from
// CABundle. IsCASecret tells the Secret from others.
type CertManager struct {
	c   client.Client
	o   Options
	now func() time.Time

	// mu serializes CA changes within the process; across processes the Secret's
	// resourceVersion does (a write from a stale cache read fails with a conflict and is retried).
	mu sync.Mutex

	// recheck receives one event per certificate check, to re-reconcile every PolicyServer.
	recheck chan event.GenericEvent
}

// NewCertManager returns a CertManager that keeps the CA Secret with c. o must have its
// defaults (as Run gives it).
func NewCertManager(c client.Client, o Options) *CertManager {
	return &CertManager{c: c, o: o, now: time.Now, recheck: make(chan event.GenericEvent, 1)}
}

// IsCASecret says whether obj is the CA Secret (a predicate for watches).
func (c *CertManager) IsCASecret(obj client.Object) bool {
	_, ok := obj.(*corev1.Secret)
	return ok && obj.GetNamespace() == c.o.Namespace && obj.GetName() == c.o.CASecret
}

// authority is a parsed CA Secret.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	old     *x509.Certificate // nil when none
	oldPEM  []byte
	created time.Time
}

// CABundle returns the PEM certificates webhooks must trust: the current CA, and the previous
// one until it expires. It creates the CA when there is none.
func (c *CertManager) CABundle(ctx context.Context) ([]byte, error) {
	ca, err := c.authority(ctx)
	if err != nil {
		return nil, err
	}
	b := append([]byte(nil), ca.certPEM...)
	if ca.old != nil && c.now().Before(ca.old.NotAfter) {
		b = append(b, ca.oldPEM...)
	}
	return b, nil
}

// Check creates, renews or prunes the CA as needed, then asks for every PolicyServer to be
// reconciled so that certificates that need it are reissued. It reports whether the CA
// Secret changed.
func (c *CertManager) Check(ctx context.Context) (changed bool, err error) {
	c.mu.Lock()
	_, changed, err = c.ensure(ctx)
	c.mu.Unlock()
	select {
	case c.recheck <- event.GenericEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.o.Namespace, Name: c.o.CASecret}}}:
	default: // one is pending already
	}
	return changed, err
}

func (c *CertManager) authority(ctx context.Context) (*authority, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ca, _, err := c.ensure(ctx)
	return ca, err
}

// ensure returns the CA, creating it when missing, replacing it when it expires within
// RenewBefore (or does not parse) and dropping an expired old CA. c.mu is held.
func (c *CertManager) ensure(ctx context.Context) (*authority, bool, error) {
	now := c.now()
	sec := &corev1.Secret{}
	err := c.c.Get(ctx, client.ObjectKey{Namespace: c.o.Namespace, Name: c.o.CASecret}, sec)
	switch {
	case apierrors.IsNotFound(err):
		ca, data, err := c.newAuthority(nil)
		if err != nil {
			return nil, false, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.o.Namespace, Name: c.o.CASecret,
				Labels:      map[string]string{LabelPartOf: v1.PartOfLabelValue},
				Annotations: map[string]string{CACreatedAnnotation: ca.created.Format(time.RFC3339Nano)}},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		if err := c.c.Create(ctx, sec); err != nil {
			return nil, false, fmt.Errorf("%w %s/%s: create: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
		}
		c.o.Logger.Info("CA created", "secret", c.o.CASecret, "namespace", c.o.Namespace, "notAfter", ca.cert.NotAfter)
		return ca, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w %s/%s: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
	}
	ca, perr := parseAuthority(sec)
	var reason string
	switch {
	case perr != nil:
		reason = perr.Error()
	case !now.Add(c.o.RenewBefore).Before(ca.cert.NotAfter):
		reason = fmt.Sprintf("the CA expires at %s, within %s", ca.cert.NotAfter.UTC().Format(time.RFC3339), c.o.RenewBefore)
	case ca.old != nil && !now.Before(ca.old.NotAfter):
		// The old CA expired: no certificate it signed is valid any more.
		upd := sec.DeepCopy()
		delete(upd.Data, OldCAKey)
		if err := c.c.Update(ctx, upd); err != nil {
			return nil, false, fmt.Errorf("%w %s/%s: dropping the expired old CA: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
		}
		ca.old, ca.oldPEM = nil, nil
		return ca, true, nil
	default:
		return ca, false, nil
	}
	var prev *authority
	if perr == nil && now.Before(ca.cert.NotAfter) {
		prev = ca
	}
	nca, data, err := c.newAuthority(prev)
	if err != nil {
		return nil, false, err
	}
	upd := sec.DeepCopy()
	upd.Data = data
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[CACreatedAnnotation] = nca.created.Format(time.RFC3339Nano)
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[LabelPartOf] = v1.PartOfLabelValue
	if err := c.c.Update(ctx, upd); err != nil {
		return nil, false, fmt.Errorf("%w %s/%s: renewing the CA: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
	}
	c.o.Logger.Info("CA renewed", "secret", c.o.CASecret, "namespace", c.o.Namespace, "reason", reason, "notAfter", nca.cert.NotAfter)
	return nca, true, nil
}

// newAuthority makes a CA (ECDSA P-256, valid CAValidity) and its Secret data, keeping prev's
// certificate as the old CA.
func (c *CertManager) newAuthority(prev *authority) (*authority, map[string][]byte, error) {
	now := c.now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          certSerial(),
		Subject:               pkix.Name{CommonName: "tollgate-ca", Organization: []string{"tollgate"}},
		NotBefore:             now.Add(-certSkew),
		NotAfter:              now.Add(c.o.CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          certKeyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: creating a CA: %w", ErrCA, err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	ca := &authority{cert: cert, certPEM: pemEncode("CERTIFICATE", der), key: key, created: now}
	data := map[string][]byte{CAKey: ca.certPEM, CAPrivateKey: pemEncode("PRIVATE KEY", keyDER)}
	if prev != nil {
		ca.old, ca.oldPEM = prev.cert, prev.certPEM
		data[OldCAKey] = prev.certPEM
	}
	return ca, data, nil
}

func parseAuthority(sec *corev1.Secret) (*authority, error) {
	ca := &authority{}
	var err error
	if ca.cert, ca.certPEM, err = parseCertPEM(sec.Data[CAKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", CAKey, err)
	}
	if !ca.cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", CAKey)
	}
	if ca.key, err = parseKeyPEM(sec.Data[CAPrivateKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", CAPrivateKey, err)
	}
	if !publicKeysEqual(ca.key.Public(), ca.cert.PublicKey) {
		return nil, fmt.Errorf("%s does not match %s", CAPrivateKey, CAKey)
	}
	if len(bytes.TrimSpace(sec.Data[OldCAKey])) > 0 {
		if ca.old, ca.oldPEM, err = parseCertPEM(sec.Data[OldCAKey]); err != nil {
			ca.old, ca.oldPEM = nil, nil // an unreadable old CA trusts nothing: ignore it
		}
	}
	ca.created = ca.cert.NotBefore.Add(certSkew)
	if t, err := time.Parse(time.RFC3339Nano, sec.Annotations[CACreatedAnnotation]); err == nil {
		ca.created = t
	}
	return ca, nil
}

// ServerCert returns the certificate and key the Secret of PolicyServer ps must hold, given the
// ones it holds (nil when none). The held pair is kept while it is signed by the current CA, has
// ServiceHost as its only SAN and does not expire within RenewBefore; while a renewed CA is
// younger than CAPropagationDelay, a valid pair signed by the previous CA is kept too.
// Otherwise a new pair is issued. recheck is when the pair needs another look.
func (c *CertManager) ServerCert(ctx context.Context, ps string, crt, key []byte) (newCrt, newKey []byte, issued bool, recheck time.Duration, err error) {
	ca, err := c.authority(ctx)
	if err != nil {
		return nil, nil, false, 0, err
	}
	now := c.now()
	host := ServiceHost(ps, c.o.Namespace)
	caReady := ca.old == nil || !now.Before(ca.created.Add(c.o.CAPropagationDelay))
	if leaf, ok := validPair(crt, key, host, now); ok {
		renewAt := leaf.NotAfter.Add(-c.o.RenewBefore)
		byCurrent := leaf.CheckSignatureFrom(ca.cert) == nil
		switch {
		case byCurrent && now.Before(renewAt):
			return crt, key, false, renewAt.Sub(now), nil
		case !caReady && ca.old != nil && leaf.CheckSignatureFrom(ca.old) == nil:
			return crt, key, false, ca.created.Add(c.o.CAPropagationDelay).Sub(now), nil
		}
	}
	newCrt, newKey, leaf, err := c.issue(ca, host)
	if err != nil {
		return nil, nil, false, 0, err
	}
	return newCrt, newKey, true, leaf.NotAfter.Add(-c.o.RenewBefore).Sub(now), nil
}

// validPair parses a certificate and key and checks that they match, that host is the
// certificate's name and only SAN, and that it has not expired.
func validPair(crt, key []byte, host string, now time.Time) (*x509.Certificate, bool) {
	if len(crt) == 0 || len(key) == 0 {
		return nil, false
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil || len(pair.Certificate) == 0 {
		return nil, false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, false
	}
	if leaf.Subject.CommonName != host || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != host || len(leaf.IPAddresses) > 0 {
		return nil, false
	}
	if !now.Before(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return nil, false
	}
	return leaf, true
}

// issue signs a server certificate for host: ECDSA P-256, CN and only SAN host, valid
// CertValidity but not past the CA's own expiry.
func (c *CertManager) issue(ca *authority, host string) (crtPEM, keyPEM []byte, leaf *x509.Certificate, err error) {
	now := c.now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	notAfter := now.Add(c.o.CertValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   certSerial(),
		Subject:        pkix.Name{CommonName: host},
		DNSNames:       []string{host},
		NotBefore:      now.Add(-certSkew),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		SubjectKeyId:   certKeyID(&key.PublicKey),
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("issuing a certificate for %s: %w", host, err)
	}
	leaf, _ = x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pemEncode("CERTIFICATE", der), pemEncode("PRIVATE KEY", keyDER), leaf, nil
}

func pemEncode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func parseCertPEM(b []byte) (*x509.Certificate, []byte, error) {
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

func parseKeyPEM(b []byte) (crypto.Signer, error) {
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

func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

func certSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func certKeyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha1.Sum(der)
	return sum[:]
}
