package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

func acceptAll(t testing.TB) *testLoader {
	l := newTestLoader(t)
	l.scripts["ok"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	return l
}

const okPolicies = "ok:\n  module: script://ok\n"

// newCA makes a CA and returns a function that issues leaf certificates.
func newCA(t testing.TB, dir, name string) (caFile string, issue func(cn string, client bool) (certFile, keyFile string)) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	caFile = filepath.Join(dir, name+"-ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	serial := int64(2)
	return caFile, func(cn string, client bool) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		serial++
		lt := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		if client {
			lt.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		} else {
			lt.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		d, err := x509.CreateCertificate(rand.Reader, lt, ca, &k.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		cf, kf := filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
		os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d}), 0o644)
		os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
		return cf, kf
	}
}

func TestTLSVersions(t *testing.T) {
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t)})
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		c, err := tls.Dial("tcp", h.srv.Addr(), &tls.Config{RootCAs: h.ca, MinVersion: v, MaxVersion: v})
		if err == nil {
			c.Close()
			t.Fatalf("TLS version %x accepted", v)
		}
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c, err := tls.Dial("tcp", h.srv.Addr(), &tls.Config{RootCAs: h.ca, MinVersion: v, MaxVersion: v, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("TLS version %x refused: %v", v, err)
		}
		c.Close()
	}
	// HTTP/2 is negotiated
	resp, err := h.client.Post(h.base+"/validate/ok", "application/json", strings.NewReader(string(reviewFor("a", "CREATE", "d", pod(nil)))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", resp.Proto)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	clientCA, issueClient := newCA(t, dir, "clients")
	_, issueOther := newCA(t, dir, "others")
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), tlsCfg: func(h *harness) *tls.Config {
		cr, err := NewCertReloader(h.certs.CertFile, h.certs.KeyFile, clientCA, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cr.TLSConfig()
	}})
	body := string(reviewFor("m", "CREATE", "d", pod(nil)))
	try := func(certFile, keyFile string) error {
		cfg := &tls.Config{RootCAs: h.ca}
		if certFile != "" {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Post(h.base+"/validate/ok", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
	if err := try("", ""); err == nil {
		t.Fatal("request without a client certificate accepted")
	}
	if err := try(issueOther("intruder", true)); err == nil {
		t.Fatal("client certificate from another CA accepted")
	}
	if err := try(issueClient("apiserver", true)); err != nil {
		t.Fatalf("valid client certificate refused: %v", err)
	}
}

// TestCertificateRotation replaces the certificate files on disk (as
// cert-manager or a Secret update does) and expects new connections to get
// the new certificate without a restart, while requests keep succeeding.
func TestCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	caFile, issue := newCA(t, dir, "rot")
	certDir := filepath.Join(dir, "serving")
	os.MkdirAll(certDir, 0o755)
	certFile, keyFile := filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")
	install := func(cn string) {
		c, k := issue(cn, false)
		cb, _ := os.ReadFile(c)
		kb, _ := os.ReadFile(k)
		os.WriteFile(keyFile+".tmp", kb, 0o600)
		os.WriteFile(certFile+".tmp", cb, 0o644)
		os.Rename(keyFile+".tmp", keyFile)
		os.Rename(certFile+".tmp", certFile)
	}
	install("first")
	h, servedCN, client := startWithCertFiles(t, certFile, keyFile, caFile, 200*time.Millisecond)
	if cn := servedCN(); cn != "first" {
		t.Fatalf("serving %q", cn)
	}
	// requests keep flowing during rotation, a new handshake each time
	l := startLoop(client, h.base+"/validate/ok", reviewFor("r", "CREATE", "d", pod(nil)), true)
	install("second")
	deadline := time.Now().Add(5 * time.Second)
	for servedCN() != "second" {
		if time.Now().After(deadline) {
			t.Fatal("rotated certificate not served within 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// a broken pair (key of another certificate) keeps the current one
	_, otherKey := issue("third", false)
	kb, _ := os.ReadFile(otherKey)
	os.WriteFile(keyFile, kb, 0o600)
	time.Sleep(600 * time.Millisecond)
	if cn := servedCN(); cn != "second" {
		t.Fatalf("after a mismatched key: serving %q", cn)
	}
	l.finish(t)
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, `tollgate_tls_certificate_reloads_total{outcome="success"} 2`) ||
		!strings.Contains(metrics, `tollgate_tls_certificate_reloads_total{outcome="failure"}`) {
		t.Errorf("certificate reload metrics missing:\n%s", grepLines(metrics, "tollgate_tls"))
	}
}

// startWithCertFiles starts a server on the certificate pair in certFile
// and keyFile, reloaded on file events and every poll. It returns the
// server, a function giving the common name of the certificate it presents
// now, and a client that trusts caFile.
func startWithCertFiles(t testing.TB, certFile, keyFile, caFile string, poll time.Duration) (*harness, func() string, *http.Client) {
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), tlsCfg: func(h *harness) *tls.Config {
		r, err := NewCertReloader(certFile, keyFile, "", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.certsR = r
		r.Watch(context.Background(), poll)
		t.Cleanup(r.Close)
		return r.TLSConfig()
	}})
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(caPEM)
	servedCN := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", h.srv.Addr(), &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return h, servedCN, client
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestEnsureSelfSignedReuses(t *testing.T) {
	dir := t.TempDir()
	a, err := EnsureSelfSigned(dir, "tollgate.example")
	if err != nil || !a.Generated {
		t.Fatalf("%+v %v", a, err)
	}
	b, err := EnsureSelfSigned(dir, "tollgate.example")
	if err != nil || b.Generated {
		t.Fatalf("second call regenerated: %+v %v", b, err)
	}
	c, err := EnsureSelfSigned(dir, "other.example")
	if err != nil || !c.Generated {
		t.Fatalf("a new name must regenerate: %+v %v", c, err)
	}
	pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	caPEM, _ := os.ReadFile(c.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, name := range []string{"localhost", "127.0.0.1", "other.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestInsecureHTTP(t *testing.T) {
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), options: func(o *config.Options) { o.InsecureHTTP = true }})
	if !strings.HasPrefix(h.base, "http://") {
		t.Fatal(h.base)
	}
	h.client = &http.Client{Timeout: 5 * time.Second}
	if _, r := h.review("/validate/ok", reviewFor("plain", "CREATE", "d", pod(nil))); !r.Allowed {
		t.Fatal("not allowed")
	}
}

// TestClientCARotation: replacing --client-ca-file switches which client
// certificates are accepted, without a restart.
func TestClientCARotation(t *testing.T) {
	dir := t.TempDir()
	caA, issueA := newCA(t, dir, "a")
	caB, issueB := newCA(t, dir, "b")
	caFile := filepath.Join(dir, "client-ca.pem")
	copyFile := func(src string) {
		b, _ := os.ReadFile(src)
		os.WriteFile(caFile+".tmp", b, 0o644)
		os.Rename(caFile+".tmp", caFile)
	}
	copyFile(caA)
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t), tlsCfg: func(h *harness) *tls.Config {
		cr, err := NewCertReloader(h.certs.CertFile, h.certs.KeyFile, caFile, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cr.Watch(context.Background(), 100*time.Millisecond)
		t.Cleanup(cr.Close)
		return cr.TLSConfig()
	}})
	certA, keyA := issueA("client-a", true)
	certB, keyB := issueB("client-b", true)
	try := func(certFile, keyFile string) error {
		pair, _ := tls.LoadX509KeyPair(certFile, keyFile)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca, Certificates: []tls.Certificate{pair}}}}
		resp, err := c.Post(h.base+"/validate/ok", "application/json", strings.NewReader(string(reviewFor("c", "CREATE", "d", pod(nil)))))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if try(certA, keyA) != nil || try(certB, keyB) == nil {
		t.Fatal("before rotation: want A accepted, B refused")
	}
	copyFile(caB)
	deadline := time.Now().Add(5 * time.Second)
	for try(certB, keyB) != nil {
		if time.Now().After(deadline) {
			t.Fatal("new client CA not used within 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if try(certA, keyA) == nil {
		t.Fatal("old client CA still accepted after rotation")
	}
}

// TestTLSCipherSuites: over TLS 1.2 the server accepts only AEAD suites with
// forward secrecy (ECDHE with AES-GCM or ChaCha20-Poly1305); a real client
// offering only a CBC suite (SHA-1 or SHA-256 MAC) or only static-RSA key
// exchange is refused, one offering a single AEAD suite is served. TLS 1.3
// is unchanged (its suites are all AEAD).
func TestTLSCipherSuites(t *testing.T) {
	h := start(t, harnessOpts{policies: okPolicies, loader: acceptAll(t)})
	dial := func(suite uint16) error {
		c, err := tls.Dial("tcp", h.srv.Addr(), &tls.Config{RootCAs: h.ca, ServerName: "localhost",
			MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}})
		if err != nil {
			return err
		}
		defer c.Close()
		if got := c.ConnectionState().CipherSuite; got != suite {
			t.Errorf("negotiated %s, offered only %s", tls.CipherSuiteName(got), tls.CipherSuiteName(suite))
		}
		return nil
	}
	for _, s := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
		tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	} {
		if err := dial(s); err == nil {
			t.Errorf("TLS 1.2 with %s accepted", tls.CipherSuiteName(s))
		} else if !strings.Contains(err.Error(), "handshake failure") {
			t.Errorf("TLS 1.2 with %s: %v, want a handshake failure", tls.CipherSuiteName(s), err)
		}
	}
	for _, s := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	} {
		if err := dial(s); err != nil {
			t.Errorf("TLS 1.2 with %s refused: %v", tls.CipherSuiteName(s), err)
		}
	}
	// a full request over TLS 1.2 with an AEAD suite, and TLS 1.3 untouched
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca,
			MinVersion: v, MaxVersion: v, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}}}}
		resp, err := c.Post(h.base+"/validate/ok", "application/json", strings.NewReader(string(reviewFor("c", "CREATE", "d", pod(nil)))))
		if err != nil {
			t.Fatalf("TLS %x: %v", v, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS.Version != v {
			t.Errorf("TLS %x: HTTP %d over TLS %x", v, resp.StatusCode, resp.TLS.Version)
		}
	}
}
