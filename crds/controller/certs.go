package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/internal/pki"
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
	pki.CA
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
	b := append([]byte(nil), ca.CertPEM...)
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
				Labels:      map[string]string{v1.LabelPartOf: v1.PartOfLabelValue},
				Annotations: map[string]string{CACreatedAnnotation: ca.created.Format(time.RFC3339Nano)}},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		if err := c.c.Create(ctx, sec); err != nil {
			return nil, false, fmt.Errorf("%w %s/%s: create: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
		}
		c.o.Logger.Info("CA created", "secret", c.o.CASecret, "namespace", c.o.Namespace, "notAfter", ca.Cert.NotAfter)
		return ca, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w %s/%s: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
	}
	ca, perr := parseAuthority(sec)
	var reason string
	switch {
	case perr != nil:
		reason = perr.Error()
	case !now.Add(c.o.RenewBefore).Before(ca.Cert.NotAfter):
		reason = fmt.Sprintf("the CA expires at %s, within %s", ca.Cert.NotAfter.UTC().Format(time.RFC3339), c.o.RenewBefore)
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
	if perr == nil && now.Before(ca.Cert.NotAfter) {
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
	upd.Labels[v1.LabelPartOf] = v1.PartOfLabelValue
	if err := c.c.Update(ctx, upd); err != nil {
		return nil, false, fmt.Errorf("%w %s/%s: renewing the CA: %w", ErrCA, c.o.Namespace, c.o.CASecret, err)
	}
	c.o.Logger.Info("CA renewed", "secret", c.o.CASecret, "namespace", c.o.Namespace, "reason", reason, "notAfter", nca.Cert.NotAfter)
	return nca, true, nil
}

// newAuthority makes a CA (ECDSA P-256, valid CAValidity) and its Secret data, keeping prev's
// certificate as the old CA.
func (c *CertManager) newAuthority(prev *authority) (*authority, map[string][]byte, error) {
	now := c.now()
	nca, err := pki.NewCA(pki.Template{CommonName: "tollgate-ca", Organizations: []string{"tollgate"},
		NotBefore: now.Add(-certSkew), NotAfter: now.Add(c.o.CAValidity)})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: creating a CA: %w", ErrCA, err)
	}
	keyPEM, err := nca.KeyPEM(pki.PKCS8)
	if err != nil {
		return nil, nil, err
	}
	ca := &authority{CA: *nca, created: now}
	data := map[string][]byte{CAKey: ca.CertPEM, CAPrivateKey: keyPEM}
	if prev != nil {
		ca.old, ca.oldPEM = prev.Cert, prev.CertPEM
		data[OldCAKey] = prev.CertPEM
	}
	return ca, data, nil
}

func parseAuthority(sec *corev1.Secret) (*authority, error) {
	ca := &authority{}
	var err error
	if ca.Cert, ca.CertPEM, err = pki.ParseCertPEM(sec.Data[CAKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", CAKey, err)
	}
	if !ca.Cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", CAKey)
	}
	if ca.Key, err = pki.ParseKeyPEM(sec.Data[CAPrivateKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", CAPrivateKey, err)
	}
	if !pki.PublicKeysEqual(ca.Key.Public(), ca.Cert.PublicKey) {
		return nil, fmt.Errorf("%s does not match %s", CAPrivateKey, CAKey)
	}
	if len(bytes.TrimSpace(sec.Data[OldCAKey])) > 0 {
		if ca.old, ca.oldPEM, err = pki.ParseCertPEM(sec.Data[OldCAKey]); err != nil {
			ca.old, ca.oldPEM = nil, nil // an unreadable old CA trusts nothing: ignore it
		}
	}
	ca.created = ca.Cert.NotBefore.Add(certSkew)
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
	host := v1.ServiceHost(ps, c.o.Namespace)
	caReady := ca.old == nil || !now.Before(ca.created.Add(c.o.CAPropagationDelay))
	if leaf, ok := validPair(crt, key, host, now); ok {
		renewAt := leaf.NotAfter.Add(-c.o.RenewBefore)
		byCurrent := leaf.CheckSignatureFrom(ca.Cert) == nil
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
	crt, err := ca.Issue(pki.Template{CommonName: host, Hosts: []string{host}, Usage: pki.ServerAuth,
		NotBefore: now.Add(-certSkew), NotAfter: now.Add(c.o.CertValidity)})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("issuing a certificate for %s: %w", host, err)
	}
	if keyPEM, err = crt.KeyPEM(pki.PKCS8); err != nil {
		return nil, nil, nil, err
	}
	return crt.CertPEM, keyPEM, crt.Cert, nil
}
