package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/host/builtin"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/internal/demo"
	"github.com/tollgate-dev/tollgate/internal/redact"
)

// modules is how serve gets its modules: the resolver (http(s):// with
// sources.yml, builtin://, registry:// through the registry client, verified
// when verification is on) and the loader built on it.
type modules struct {
	loader       *server.HostLoader
	registry     *oci.Lazy     // the registry client (the oci capabilities use it too)
	verification *verify.Files // nil when verification is off
}

// newModules compiles sources.yml, makes the registry client (credentials
// from --docker-config-json-path, the module store under --cache-dir, so a
// restart does not pull again what is pinned by digest) and, with
// --verification-path, the verifier: a config or trust root that cannot be
// loaded stops serve, nothing is loaded unverified.
func newModules(o Options, cfg *config.Config, host *policy.Host) (*modules, error) {
	sources, err := oci.NewSources(o.Config.SourcesPath, cfg.Sources, "")
	if err != nil {
		return nil, fmt.Errorf("--sources-path: %w", err)
	}
	resolver := newResolver(cfg.Sources, sources)
	store := ""
	if o.Config.CacheDir != "" {
		store = filepath.Join(o.Config.CacheDir, "store")
	}
	m := &modules{registry: &oci.Lazy{Open: func() (*oci.Client, error) {
		return oci.NewClient(oci.Options{StorePath: store, Sources: sources, DockerConfigPath: o.Config.DockerConfigJSONPath, Logger: o.Logger})
	}}}
	resolver.Registry = m.registry
	if m.verification, err = newVerification(o, m.registry); err != nil {
		return nil, err
	}
	var r server.DigestResolver = resolveWith(resolver, cfg.Sources)
	if m.verification != nil {
		resolver.Registry = m.verification
		r = verifiedModules{inner: r}
	}
	m.loader = &server.HostLoader{Host: host, Resolver: r, ShareInstances: builtin.IsSettingsKeyed}
	return m, nil
}

// newResolver is serve's module resolver: the modules built into the binary
// (host/builtin) and the embedded example modules under builtin://examples/,
// and sources.yml (compiled: its certificates read) applied to http(s)://.
func newResolver(src config.Sources, compiled *oci.Sources) *module.Resolver {
	r := &module.Resolver{}
	r.Builtin = func(name string) ([]byte, error) {
		if strings.HasPrefix(name, demo.Prefix) {
			return demo.Module(name)
		}
		return builtin.Module(name)
	}
	r.BuiltinDigest = func(name string) (string, error) {
		if strings.HasPrefix(name, demo.Prefix) {
			return "", nil // hashed by the loader
		}
		return builtin.Digest(name)
	}
	if len(src.InsecureSources) == 0 && len(src.SourceAuthorities) == 0 {
		return r
	}
	insecure := map[string]bool{}
	for _, h := range src.InsecureSources {
		insecure[h] = true
	}
	roots := map[string]*x509.CertPool{}
	for host := range src.SourceAuthorities {
		roots[host] = compiled.CertPool(host)
	}
	lookup := func(hostport string) (bool, *x509.CertPool) {
		host, _, _ := net.SplitHostPort(hostport)
		for _, k := range []string{hostport, host} {
			if insecure[k] {
				return true, nil
			}
			if p := roots[k]; p != nil {
				return false, p
			}
		}
		return false, nil
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			skip, pool := lookup(addr)
			c := &tls.Config{ServerName: host, RootCAs: pool, InsecureSkipVerify: skip, MinVersion: tls.VersionTLS12}
			return tls.DialWithDialer(dialer, network, addr, c)
		},
	}
	r.HTTPClient = &http.Client{Timeout: 60 * time.Second, Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme == "http" {
				if skip, _ := lookup(req.URL.Host); !skip {
					return fmt.Errorf("redirect to plain http://%s, which is not an insecure source", req.URL.Host)
				}
			}
			return nil
		}}
	r.AllowHTTP = len(insecure) > 0
	return r
}

// resolveWith fetches a module, allowing plain http:// only for the insecure
// sources of sources.yml.
func resolveWith(r *module.Resolver, src config.Sources) serveModules {
	insecure := map[string]bool{}
	for _, h := range src.InsecureSources {
		insecure[h] = true
	}
	return serveModules{r: r, insecure: insecure}
}

// serveModules is serve's server.DigestResolver: the digest of a built-in
// module comes with it (host/builtin.Digest), so that a start or reload does
// not hash the module.
type serveModules struct {
	r        *module.Resolver
	insecure map[string]bool
}

func (s serveModules) Resolve(ctx context.Context, uri string) ([]byte, error) {
	b, _, err := s.ResolveDigest(ctx, uri)
	return b, err
}

func (s serveModules) ResolveDigest(ctx context.Context, uri string) ([]byte, string, error) {
	b, d, err := s.resolveDigest(ctx, uri)
	return b, d, redact.Error(err, uri) // module.Resolve's errors are masked already; these are not
}

// ResolveManifest is ResolveDigest with the manifest digest of a registry://
// module (server.ManifestResolver).
func (s serveModules) ResolveManifest(ctx context.Context, uri string) ([]byte, string, string, error) {
	b, d, m, err := s.resolveManifest(ctx, uri)
	return b, d, m, redact.Error(err, uri)
}

func (s serveModules) resolveDigest(ctx context.Context, uri string) ([]byte, string, error) {
	b, d, _, err := s.resolveManifest(ctx, uri)
	return b, d, err
}

func (s serveModules) resolveManifest(ctx context.Context, uri string) ([]byte, string, string, error) {
	if strings.HasPrefix(uri, "http://") {
		u, err := url.Parse(uri)
		if err != nil {
			return nil, "", "", err
		}
		if !s.insecure[u.Host] && !s.insecure[u.Hostname()] {
			return nil, "", "", fmt.Errorf("%w %q: plain http:// is allowed only for hosts listed in sources.yml insecure_sources", module.ErrFetch, uri)
		}
	}
	m, err := s.r.Resolve(ctx, uri)
	if err != nil {
		return nil, "", "", err
	}
	return m.Wasm, m.Digest, m.ManifestDigest, nil
}

// newVerification is the registry fetcher when --verification-path is set:
// every module is verified (cached by digest) and fetched pinned to the
// verified digest; nil when verification is off.
func newVerification(o Options, reg *oci.Lazy) (*verify.Files, error) {
	if o.VerificationPath == "" {
		if o.TrustConfigPath != "" {
			return nil, errors.New("--sigstore-trust-config goes with --verification-path")
		}
		return nil, nil
	}
	client, err := reg.Client()
	if err != nil {
		return nil, err
	}
	vf := &verify.Files{ConfigPath: o.VerificationPath, TrustPath: o.TrustConfigPath,
		ConfigName: "--verification-path", TrustName: "--sigstore-trust-config", Registry: client, Inner: reg}
	if _, err := vf.Load(); err != nil {
		return nil, err
	}
	o.Logger.Info("signature verification on: only verified registry:// modules load", "config", o.VerificationPath,
		"requirements", len(vf.Verifier().Config().Entries()))
	return vf, nil
}

// watchVerification reloads the policies when the verification config or
// trust root files change, until ctx ends. A change that does not load
// (an empty or half-written file included) is reported as the server
// reports a rejected policies.yml (srv.RejectConfig: /policies' lastReload,
// a metric), the current Verifier stays, and the files are read again at
// the next poll.
func watchVerification(ctx context.Context, vf *verify.Files, o Options, srv *server.Server) {
	const trigger = "verification config"
	every := o.VerificationPoll
	if every <= 0 {
		every = 2 * time.Second
	}
	vf.Watch(ctx, every, func() {
		o.Logger.Info("verification config changed: verifying every module again", "config", vf.ConfigPath)
		go srv.Reload(ctx, trigger, true) // the server logs the outcome
	}, func() {
		go srv.Reload(ctx, trigger, false) // back to the serving one: clears the rejection
	}, func(err error) {
		srv.RejectConfig(trigger, nil, fmt.Errorf("the verification config change is rejected, the previous one stays: %w", err))
	})
}

// verifiedModules refuses, when verification is on, the modules that cannot
// carry signatures: paths, file://, http(s)://. Built-in modules are part
// of the binary and load as usual.
type verifiedModules struct {
	inner server.DigestResolver
}

func (v verifiedModules) check(uri string) error {
	if strings.HasPrefix(uri, "registry://") || strings.HasPrefix(uri, "builtin://") {
		return nil
	}
	return &verify.Refused{Err: fmt.Errorf("%w: %q: --verification-path is set, and only registry:// modules (signed) and builtin:// modules load", verify.ErrNotRegistry, uri)}
}

func (v verifiedModules) Resolve(ctx context.Context, uri string) ([]byte, error) {
	if err := v.check(uri); err != nil {
		return nil, err
	}
	return v.inner.Resolve(ctx, uri)
}

func (v verifiedModules) ResolveManifest(ctx context.Context, uri string) ([]byte, string, string, error) {
	if err := v.check(uri); err != nil {
		return nil, "", "", err
	}
	if mr, ok := v.inner.(server.ManifestResolver); ok {
		return mr.ResolveManifest(ctx, uri)
	}
	b, d, err := v.inner.ResolveDigest(ctx, uri)
	return b, d, "", err
}

func (v verifiedModules) ResolveDigest(ctx context.Context, uri string) ([]byte, string, error) {
	if err := v.check(uri); err != nil {
		return nil, "", err
	}
	return v.inner.ResolveDigest(ctx, uri)
}
