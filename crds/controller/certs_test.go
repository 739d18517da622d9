package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// testClock is a settable clock for CertManager.now.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time          { return c.t }
func (c *testClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func testCertOptions(t *testing.T) Options {
	t.Helper()
	o, err := Options{
		Namespace:  "tollgate",
		CAValidity: 10 * time.Hour, CertValidity: 2 * time.Hour, RenewBefore: time.Hour,
		CAPropagationDelay: 2 * time.Minute,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func newTestCertManager(t *testing.T, objs ...client.Object) (*CertManager, client.Client, *testClock) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).Build()
	clock := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := NewCertManager(c, testCertOptions(t))
	m.now = clock.now
	return m, c, clock
}

func pemCerts(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func caSecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "tollgate", Name: "tollgate-ca"}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// verifyLeaf checks that crt is a P-256 server certificate for ps's Service signed by ca.
func verifyLeaf(t *testing.T, crt []byte, ca *x509.Certificate, now time.Time) *x509.Certificate {
	t.Helper()
	leaf := pemCerts(t, crt)[0]
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	host := v1.ServiceHost("default", "tollgate")
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now}); err != nil {
		t.Fatalf("leaf does not verify with the CA: %v", err)
	}
	if leaf.Subject.CommonName != host || len(leaf.DNSNames) != 1 {
		t.Errorf("CN %q, SANs %v; want %s only", leaf.Subject.CommonName, leaf.DNSNames, host)
	}
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("leaf key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	return leaf
}

func TestCertManagerCreatesCAAndIssues(t *testing.T) {
	ctx := context.Background()
	m, c, clock := newTestCertManager(t)
	bundle, err := m.CABundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sec := caSecret(t, c)
	if string(sec.Data[CAKey]) != string(bundle) || len(sec.Data[CAPrivateKey]) == 0 || len(sec.Data[OldCAKey]) != 0 {
		t.Fatalf("CA secret keys: %v", sec.Data)
	}
	if sec.Annotations[CACreatedAnnotation] == "" || sec.Labels[v1.LabelPartOf] != "tollgate" {
		t.Errorf("CA secret metadata: %v %v", sec.Annotations, sec.Labels)
	}
	ca := pemCerts(t, bundle)[0]
	if !ca.IsCA || ca.NotAfter.Sub(clock.t) != 10*time.Hour {
		t.Errorf("CA: IsCA %v, validity %s", ca.IsCA, ca.NotAfter.Sub(clock.t))
	}

	// A fresh CA signs at once: there is no previous CA to wait for.
	crt, key, issued, recheck, err := m.ServerCert(ctx, "default", nil, nil)
	if err != nil || !issued {
		t.Fatalf("issued %v, err %v", issued, err)
	}
	leaf := verifyLeaf(t, crt, ca, clock.t)
	if leaf.NotAfter.Sub(clock.t) != 2*time.Hour || recheck != time.Hour {
		t.Errorf("leaf validity %s, recheck %s; want 2h, 1h", leaf.NotAfter.Sub(clock.t), recheck)
	}

	// A good pair is kept.
	crt2, key2, issued, _, err := m.ServerCert(ctx, "default", crt, key)
	if err != nil || issued || string(crt2) != string(crt) || string(key2) != string(key) {
		t.Fatalf("good pair replaced (issued %v, err %v)", issued, err)
	}
	// Another server's certificate (wrong SAN) or a key that does not match is replaced.
	other, otherKey, _, _, _ := m.ServerCert(ctx, "other", nil, nil)
	if _, _, issued, _, _ := m.ServerCert(ctx, "default", other, otherKey); !issued {
		t.Error("a certificate with another SAN was kept")
	}
	if _, _, issued, _, _ := m.ServerCert(ctx, "default", crt, otherKey); !issued {
		t.Error("a key that does not match was kept")
	}
	// A certificate within RenewBefore of its expiry is replaced.
	clock.advance(61 * time.Minute)
	if _, _, issued, _, _ := m.ServerCert(ctx, "default", crt, key); !issued {
		t.Error("an expiring certificate was kept")
	}
	// A certificate signed by another CA is replaced.
	m2, _, _ := newTestCertManager(t)
	m2.now = clock.now
	foreign, foreignKey, _, _, _ := m2.ServerCert(ctx, "default", nil, nil)
	if _, _, issued, _, _ := m.ServerCert(ctx, "default", foreign, foreignKey); !issued {
		t.Error("a certificate of another CA was kept")
	}
}

func TestCertManagerRotation(t *testing.T) {
	ctx := context.Background()
	m, c, clock := newTestCertManager(t)
	if changed, err := m.Check(ctx); err != nil || !changed {
		t.Fatalf("first check: changed %v, err %v", changed, err)
	}
	if changed, err := m.Check(ctx); err != nil || changed {
		t.Fatalf("second check: changed %v, err %v", changed, err)
	}
	oldCA := pemCerts(t, caSecret(t, c).Data[CAKey])[0]

	// At 8h50m the leaf issued now expires at the CA's expiry (10h), not later.
	clock.advance(8*time.Hour + 50*time.Minute)
	crt, key, _, _, err := m.ServerCert(ctx, "default", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if leaf := verifyLeaf(t, crt, oldCA, clock.t); !leaf.NotAfter.Equal(oldCA.NotAfter) {
		t.Errorf("leaf outlives its CA: %s > %s", leaf.NotAfter, oldCA.NotAfter)
	}

	// At 9h05m the CA is within RenewBefore (1h) of its expiry: it is replaced, the old one kept.
	clock.advance(15 * time.Minute)
	if changed, err := m.Check(ctx); err != nil || !changed {
		t.Fatalf("rotation: changed %v, err %v", changed, err)
	}
	sec := caSecret(t, c)
	newCA := pemCerts(t, sec.Data[CAKey])[0]
	if newCA.Equal(oldCA) || !pemCerts(t, sec.Data[OldCAKey])[0].Equal(oldCA) {
		t.Fatal("CA not rotated, or the old CA not kept in old-ca.crt")
	}
	bundle, _ := m.CABundle(ctx)
	if got := pemCerts(t, bundle); len(got) != 2 || !got[0].Equal(newCA) || !got[1].Equal(oldCA) {
		t.Fatalf("bundle has %d certificates, want new then old", len(got))
	}

	// Within CAPropagationDelay the old CA's still valid certificate is kept...
	clock.advance(time.Minute)
	crt2, _, issued, recheck, err := m.ServerCert(ctx, "default", crt, key)
	if err != nil || issued || string(crt2) != string(crt) {
		t.Fatalf("certificate replaced before the new CA propagated (issued %v, err %v)", issued, err)
	}
	if recheck != time.Minute {
		t.Errorf("recheck = %s, want 1m (the rest of the propagation delay)", recheck)
	}
	// ...but a server without a usable certificate gets one from the new CA at once.
	fresh, _, issued, _, _ := m.ServerCert(ctx, "default", nil, nil)
	if !issued {
		t.Fatal("no certificate issued")
	}
	verifyLeaf(t, fresh, newCA, clock.t)

	// After the delay the new CA signs.
	clock.advance(time.Minute)
	crt3, _, issued, _, err := m.ServerCert(ctx, "default", crt, key)
	if err != nil || !issued {
		t.Fatalf("certificate of the old CA kept after the propagation delay (err %v)", err)
	}
	verifyLeaf(t, crt3, newCA, clock.t)

	// Once the old CA expired it leaves the Secret and the bundle.
	clock.advance(time.Hour)
	if changed, err := m.Check(ctx); err != nil || !changed {
		t.Fatalf("prune: changed %v, err %v", changed, err)
	}
	if sec := caSecret(t, c); len(sec.Data[OldCAKey]) != 0 {
		t.Error("expired old CA still in the Secret")
	}
	if bundle, _ := m.CABundle(ctx); len(pemCerts(t, bundle)) != 1 {
		t.Error("expired old CA still in the bundle")
	}
	select {
	case <-m.recheck:
	default:
		t.Error("Check did not ask for the PolicyServers to be reconciled")
	}
}

func TestCertManagerReplacesBrokenCA(t *testing.T) {
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tollgate", Name: "tollgate-ca"},
		Data: map[string][]byte{CAKey: []byte("garbage")}}
	m, c, _ := newTestCertManager(t, broken)
	bundle, err := m.CABundle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pemCerts(t, bundle)) != 1 || len(caSecret(t, c).Data[CAPrivateKey]) == 0 {
		t.Fatal("broken CA not replaced")
	}
	if !m.IsCASecret(caSecret(t, c)) || m.IsCASecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tollgate", Name: "x"}}) {
		t.Error("IsCASecret")
	}
}
