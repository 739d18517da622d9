package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tollgate-dev/tollgate/internal/pki"
)

// ErrTLS is wrapped by certificate loading errors.
var ErrTLS = errors.New("TLS configuration")

// CertReloader serves a certificate pair (and optional client CA bundle)
// from files and reloads them when they change: fsnotify events on the
// files' directories (which catches Kubernetes' atomic symlink swaps) plus a
// polling fallback. A change that does not load (for example a key written
// before its certificate) keeps the previous certificate and is retried on
// the next event or poll.
type CertReloader struct {
	certFile, keyFile, caFile string
	logger                    *slog.Logger
	hookMu                    sync.Mutex
	onReload                  func(ok bool, notAfter time.Time)

	cert   atomic.Pointer[tls.Certificate]
	pool   atomic.Pointer[x509.CertPool]
	mu     sync.Mutex
	last   []byte // concatenated file contents last loaded
	closed chan struct{}
	wg     sync.WaitGroup
}

// NewCertReloader loads the files once; caFile may be empty.
func NewCertReloader(certFile, keyFile, caFile string, logger *slog.Logger, onReload func(ok bool, notAfter time.Time)) (*CertReloader, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, caFile: caFile, logger: logger, onReload: onReload, closed: make(chan struct{})}
	if _, err := r.reload(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *CertReloader) read() ([]byte, []byte, []byte, error) {
	c, err := os.ReadFile(r.certFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: --cert-file: %w", ErrTLS, err)
	}
	k, err := os.ReadFile(r.keyFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: --key-file: %w", ErrTLS, err)
	}
	var ca []byte
	if r.caFile != "" {
		if ca, err = os.ReadFile(r.caFile); err != nil {
			return nil, nil, nil, fmt.Errorf("%w: --client-ca-file: %w", ErrTLS, err)
		}
	}
	return c, k, ca, nil
}

// reload loads the files if they changed; it reports whether it swapped.
func (r *CertReloader) reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, k, ca, err := r.read()
	if err != nil {
		return false, err
	}
	all := bytes.Join([][]byte{c, k, ca}, []byte{0})
	if r.cert.Load() != nil && bytes.Equal(all, r.last) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return false, fmt.Errorf("%w: %s / %s: %w", ErrTLS, r.certFile, r.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrTLS, r.certFile, err)
	}
	pair.Leaf = leaf
	if r.caFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return false, fmt.Errorf("%w: --client-ca-file %s: no PEM certificate in it", ErrTLS, r.caFile)
		}
		r.pool.Store(pool)
	}
	r.cert.Store(&pair)
	r.last = all
	r.report(true, leaf.NotAfter)
	return true, nil
}

func (r *CertReloader) report(ok bool, notAfter time.Time) {
	r.hookMu.Lock()
	f := r.onReload
	r.hookMu.Unlock()
	if f != nil {
		f(ok, notAfter)
	}
}

// SetHook sets the function told about every reload (and, at once, about
// the certificate loaded now).
func (r *CertReloader) SetHook(f func(ok bool, notAfter time.Time)) {
	r.hookMu.Lock()
	r.onReload = f
	r.hookMu.Unlock()
	if c := r.cert.Load(); c != nil && f != nil {
		f(true, c.Leaf.NotAfter)
	}
}

// Certificate is the current certificate.
func (r *CertReloader) Certificate() *tls.Certificate { return r.cert.Load() }

// CipherSuites are the TLS 1.2 suites the webhook accepts: AEAD ciphers
// (AES-GCM, ChaCha20-Poly1305) with ECDHE key exchange only, for ECDSA and
// RSA certificates. Go's defaults also accept ECDHE with AES-CBC and a
// SHA-1 MAC (MAC-then-encrypt, the Lucky13 class of padding oracles); they
// are refused, as is static RSA key exchange (no forward secrecy). Every
// client of a webhook (the apiserver's crypto/tls) offers ECDHE with
// AES-GCM. TLS 1.3 suites are not configurable in Go and are all AEAD.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLSConfig is a TLS 1.2+ server configuration (TLS 1.2 with CipherSuites
// only) that always uses the current certificate and client CA bundle (mTLS
// when a CA file was given).
func (r *CertReloader) TLSConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: CipherSuites, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			CipherSuites: CipherSuites,
			NextProtos:   []string{"h2", "http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return r.cert.Load(), nil
			},
		}
		if p := r.pool.Load(); p != nil {
			c.ClientCAs = p
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base
}

// Watch reloads on file events and every poll interval until ctx ends or
// Close is called.
func (r *CertReloader) Watch(ctx context.Context, poll time.Duration) {
	w, err := fsnotify.NewWatcher()
	var events chan fsnotify.Event
	if err == nil {
		dirs := map[string]bool{}
		for _, f := range []string{r.certFile, r.keyFile, r.caFile} {
			if f != "" {
				dirs[filepath.Dir(f)] = true
			}
		}
		for d := range dirs {
			if err := w.Add(d); err != nil {
				r.logger.Warn("cannot watch certificate directory; polling only", "dir", d, "error", err)
			}
		}
		events = w.Events
	} else {
		r.logger.Warn("cannot watch certificate files; polling only", "error", err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if w != nil {
			defer w.Close()
		}
		t := time.NewTicker(poll)
		defer t.Stop()
		var debounce <-chan time.Time
		try := func() {
			swapped, err := r.reload()
			switch {
			case err != nil:
				r.logger.Warn("certificate reload failed; keeping the current certificate", "error", err)
				r.report(false, time.Time{})
			case swapped:
				r.logger.Info("certificate reloaded", "cert", r.certFile, "notAfter", r.cert.Load().Leaf.NotAfter)
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.closed:
				return
			case <-events:
				debounce = time.After(100 * time.Millisecond)
			case <-debounce:
				debounce = nil
				try()
			case <-t.C:
				try()
			}
		}
	}()
}

// Close stops watching.
func (r *CertReloader) Close() {
	select {
	case <-r.closed:
	default:
		close(r.closed)
	}
	r.wg.Wait()
}

// SelfSigned describes the files EnsureSelfSigned wrote or reused.
type SelfSigned struct {
	CAFile, CertFile, KeyFile string
	Generated                 bool
}

// EnsureSelfSigned makes (or reuses, while valid for another day) a CA and a
// serving certificate for localhost, 127.0.0.1, ::1 and the extra names, in
// dir. The CA's key is not kept: the CA only exists to be trusted by clients.
func EnsureSelfSigned(dir string, extraNames ...string) (*SelfSigned, error) {
	s := &SelfSigned{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if pair, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile); err == nil {
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && time.Until(leaf.NotAfter) > 24*time.Hour && coversNames(leaf, extraNames) {
			if _, err := os.Stat(s.CAFile); err == nil {
				return s, nil
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	now := time.Now()
	ca, err := pki.NewCA(pki.Template{CommonName: "tollgate local CA", NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	crt, err := ca.Issue(pki.Template{CommonName: "tollgate", Usage: pki.ServerAuth,
		Hosts:     append([]string{"localhost", "127.0.0.1", "::1"}, extraNames...),
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	keyPEM, err := crt.KeyPEM(pki.SEC1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	write := func(path string, b []byte, mode os.FileMode) error {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, mode); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(s.CAFile, ca.CertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	if err := write(s.KeyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	if err := write(s.CertFile, crt.CertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	s.Generated = true
	return s, nil
}

func coversNames(leaf *x509.Certificate, names []string) bool {
	for _, n := range names {
		if n != "" && leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}
