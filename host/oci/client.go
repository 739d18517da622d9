package oci

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// DefaultMaxModuleSize bounds the Wasm layer of a pulled module.
const DefaultMaxModuleSize int64 = 256 << 20

// Options configure a Client. The zero value is usable: default store,
// default Docker config, default sources file, default limits.
type Options struct {
	// StorePath is the store directory ("" = DefaultStorePath()).
	StorePath string
	// DockerConfigPath is a Docker config.json for credentials ("" = $DOCKER_CONFIG/config.json
	// or ~/.docker/config.json). Credential helpers (credHelpers, credsStore) are honoured.
	DockerConfigPath string
	// SourcesPath is a sources.yml ("" = DefaultSourcesPath(), if present).
	// Ignored when Sources is set.
	SourcesPath string
	// Sources, when non-nil, is used instead of reading SourcesPath.
	Sources *Sources
	// MaxModuleSize bounds a module's Wasm layer (0 = DefaultMaxModuleSize).
	MaxModuleSize int64
	// ConnectTimeout bounds dialing and the TLS handshake (0 = 10s).
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for response headers (0 = 30s).
	ResponseTimeout time.Duration
	// Logger receives warnings (store fallbacks); nil = slog.Default().
	Logger *slog.Logger
	// UserAgent is sent to registries ("" = "tollgate").
	UserAgent string
	// Proxy chooses the proxy for a request (nil = http.ProxyFromEnvironment:
	// HTTPS_PROXY, HTTP_PROXY, NO_PROXY).
	Proxy func(*http.Request) (*url.URL, error)
}

// Client pulls and pushes policy modules and owns the local store. It is
// safe for concurrent use; concurrent pulls of the same reference are
// deduplicated.
type Client struct {
	opts    Options
	store   *Store
	sources *Sources
	creds   credentials.Store
	cache   auth.Cache
	log     *slog.Logger
	group   singleflight.Group

	mu    sync.Mutex
	hosts map[string]*hostConn
}

type hostConn struct {
	http     *http.Client
	insecure bool

	mu        sync.Mutex
	decided   bool // the probe got an answer: plainHTTP is settled
	plainHTTP bool
}

// NewClient opens the store and reads sources and credentials configuration.
func NewClient(opts Options) (*Client, error) {
	if opts.MaxModuleSize <= 0 {
		opts.MaxModuleSize = DefaultMaxModuleSize
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.ResponseTimeout <= 0 {
		opts.ResponseTimeout = 30 * time.Second
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "tollgate"
	}
	if opts.Proxy == nil {
		opts.Proxy = http.ProxyFromEnvironment
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	st, err := OpenStore(opts.StorePath)
	if err != nil {
		return nil, err
	}
	src := opts.Sources
	if src == nil {
		if src, err = LoadSources(opts.SourcesPath); err != nil {
			return nil, err
		}
	}
	var cs credentials.Store
	if opts.DockerConfigPath != "" {
		cs, err = credentials.NewStore(opts.DockerConfigPath, credentials.StoreOptions{})
	} else {
		cs, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
	}
	if err != nil {
		where := opts.DockerConfigPath
		if where == "" {
			where = "the default Docker config"
		}
		return nil, fmt.Errorf("docker config %s: %w", where, err)
	}
	return &Client{
		opts:    opts,
		store:   st,
		sources: src,
		creds:   cs,
		cache:   auth.NewCache(),
		log:     log,
		hosts:   map[string]*hostConn{},
	}, nil
}

// Store is the client's local store.
func (c *Client) Store() *Store { return c.store }

// MaxModuleSize is the configured limit.
func (c *Client) MaxModuleSize() int64 { return c.opts.MaxModuleSize }

// conn returns the HTTP client for a registry host, with TLS configured
// from sources.yml and proxies from the environment.
func (c *Client) conn(ctx context.Context, host string) *hostConn {
	c.mu.Lock()
	hc, ok := c.hosts[host]
	if !ok {
		insecure := c.sources.IsInsecure(host)
		tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.sources.CertPool(host)}
		if insecure {
			tlsCfg.InsecureSkipVerify = true //nolint:gosec // the user listed this host in insecure_sources
		}
		dialer := &net.Dialer{Timeout: c.opts.ConnectTimeout, KeepAlive: 30 * time.Second}
		tr := &http.Transport{
			Proxy:                 c.opts.Proxy,
			DialContext:           dialer.DialContext,
			TLSClientConfig:       tlsCfg,
			TLSHandshakeTimeout:   c.opts.ConnectTimeout,
			ResponseHeaderTimeout: c.opts.ResponseTimeout,
			ExpectContinueTimeout: time.Second,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}
		hc = &hostConn{http: &http.Client{Transport: tr}, insecure: insecure}
		c.hosts[host] = hc
	}
	c.mu.Unlock()
	if hc.insecure {
		// insecure_sources: HTTPS (certificate not verified) if the host speaks
		// it, else plain HTTP, as Kubewarden does. Settled by the first probe
		// that gets an answer; while the host is down, each use probes again.
		hc.mu.Lock()
		if !hc.decided {
			hc.plainHTTP, hc.decided = c.probePlainHTTP(ctx, host, hc.http)
		}
		hc.mu.Unlock()
	}
	return hc
}

// plain reports whether requests to the host go over plain HTTP.
func (hc *hostConn) plain() bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.plainHTTP
}

// probePlainHTTP reports whether host answers plain HTTP rather than HTTPS,
// and whether it answered at all (decided).
func (c *Client) probePlainHTTP(ctx context.Context, host string, hc *http.Client) (plain, decided bool) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout+c.opts.ResponseTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/v2/", nil)
	if err != nil {
		return false, false
	}
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
		return false, true
	}
	var rh tls.RecordHeaderError
	if errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &rh) {
		return true, true
	}
	return false, false
}

// repository returns an oras repository client for ref.
func (c *Client) repository(ctx context.Context, ref Reference) *remote.Repository {
	hc := c.conn(ctx, ref.Registry)
	ac := &auth.Client{
		Client:     hc.http,
		Credential: credentials.Credential(c.creds),
		Cache:      c.cache,
		Header:     http.Header{"User-Agent": {c.opts.UserAgent}},
	}
	return &remote.Repository{
		Client:    ac,
		Reference: registry.Reference{Registry: ref.Registry, Repository: ref.Repository},
		PlainHTTP: hc.plain(),
	}
}

// classify maps an error from the registry client to this package's
// sentinels, naming the reference and what to do about it.
func (c *Client) classify(ref Reference, op string, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrNotWasm, ErrTooLarge, ErrDigestMismatch, ErrIncomplete, ErrNotInStore, ErrInvalidModule, ErrUnannotated} {
		if errors.Is(err, s) {
			if !strings.Contains(err.Error(), ref.String()) {
				return fmt.Errorf("%s %s: %w", op, ref, err)
			}
			return err
		}
	}
	host := ref.Registry
	var er *errcode.ErrorResponse
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s %s: %w", op, ref, err)
	case errors.As(err, &er) && (er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%w: %s %s: registry %s answered %d %s: check the credentials for %s in %s",
			ErrUnauthorized, op, ref, host, er.StatusCode, http.StatusText(er.StatusCode), host, c.dockerConfigName())
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		return fmt.Errorf("%w: %s %s: registry %s requires credentials and %s has none for it",
			ErrUnauthorized, op, ref, host, c.dockerConfigName())
	case errors.Is(err, errdef.ErrNotFound) || (errors.As(err, &er) && er.StatusCode == http.StatusNotFound):
		return fmt.Errorf("%w: %s %s: registry %s has no such repository, tag or digest", ErrNotFound, op, ref, host)
	case isCertError(err):
		return fmt.Errorf("%w: %s %s: %v: add a CA for %q under source_authorities, or list it in insecure_sources, in sources.yml (--sources-path)",
			ErrUntrustedCertificate, op, ref, err, host)
	case errors.Is(err, http.ErrSchemeMismatch):
		return fmt.Errorf("%w: %s %s: registry %s speaks plain HTTP: list it in insecure_sources in sources.yml (--sources-path) to allow that: %v",
			ErrUnreachable, op, ref, host, err)
	case isNetError(err):
		return fmt.Errorf("%w: %s %s: cannot reach registry %s: %v", ErrUnreachable, op, ref, host, err)
	}
	return fmt.Errorf("%s %s: %w", op, ref, err)
}

func (c *Client) dockerConfigName() string {
	if c.opts.DockerConfigPath != "" {
		return c.opts.DockerConfigPath
	}
	return "the Docker config (--docker-config-json-path)"
}

func isCertError(err error) bool {
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	var he x509.HostnameError
	var cv *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &he) || errors.As(err, &cv)
}

func isNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	var rh tls.RecordHeaderError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.As(err, &de) || errors.As(err, &rh) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, http.ErrSchemeMismatch)
}
