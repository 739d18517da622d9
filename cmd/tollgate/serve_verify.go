package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/server"
	"github.com/tollgate-dev/tollgate/host/verify"
)

// addVerificationFlags registers the policy-server's signature flags on serve.
func addVerificationFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.String("verification-path", "", "Kubewarden verification config: only registry:// modules whose Sigstore signatures satisfy it are loaded "+
		"(the others fail to load, with the reason in /policies)")
	fs.String("sigstore-trust-config", "", "with --verification-path: Sigstore ClientTrustConfig or trusted_root.json for keyless signatures "+
		"(default: the public-good root through Sigstore's TUF repository)")
}

// verificationPoll is how often serve looks at the verification config and
// trust root files for changes (a Kubernetes ConfigMap volume changes them
// in place, through a symlink swap).
var verificationPoll = 2 * time.Second

// verification is serve's registry fetcher when --verification-path is
// set: every module is verified (cached by digest) and fetched pinned to
// the verified digest. The config and trust root files are watched; a
// change makes a new Verifier (an empty cache) and reloads the policies.
type verification struct {
	path, trustPath string
	client          verify.Registry
	inner           module.RegistryFetcher
	log             *slog.Logger

	v                    atomic.Pointer[verify.Verifier]
	cfgBytes, trustBytes []byte // what v was made from (the watch's only writer)
}

// withVerification wraps serve's registry fetcher so that it fetches only
// modules verified against --verification-path (pinned to the verified
// digest); nil when verification is off. A config or trust root that
// cannot be loaded stops serve: nothing is loaded unverified.
func withVerification(cmd *cobra.Command, reg module.RegistryFetcher, logger *slog.Logger) (*verification, error) {
	path, _ := cmd.Flags().GetString("verification-path")
	trust, _ := cmd.Flags().GetString("sigstore-trust-config")
	if path == "" {
		if trust != "" {
			return nil, errors.New("--sigstore-trust-config goes with --verification-path")
		}
		return nil, nil
	}
	lr, ok := reg.(*lazyRegistry)
	if !ok {
		return nil, fmt.Errorf("--verification-path: registry fetcher %T cannot read signatures", reg)
	}
	client, err := lr.get()
	if err != nil {
		return nil, err
	}
	vf := &verification{path: path, trustPath: trust, client: client, inner: reg, log: logger}
	if _, err := vf.load(); err != nil {
		return nil, err
	}
	logger.Info("signature verification on: only verified registry:// modules load", "config", path,
		"requirements", len(vf.v.Load().Config().Entries()))
	return vf, nil
}

// load reads the config and trust root files and, when they changed, makes
// a new Verifier.
func (vf *verification) load() (changed bool, err error) {
	cb, err := os.ReadFile(vf.path)
	if err != nil {
		return false, fmt.Errorf("--verification-path: %w", err)
	}
	var tb []byte
	if vf.trustPath != "" {
		if tb, err = os.ReadFile(vf.trustPath); err != nil {
			return false, fmt.Errorf("--sigstore-trust-config: %w", err)
		}
	}
	if vf.v.Load() != nil && bytes.Equal(cb, vf.cfgBytes) && bytes.Equal(tb, vf.trustBytes) {
		return false, nil
	}
	if len(bytes.TrimSpace(cb)) == 0 {
		return false, fmt.Errorf("--verification-path: %s is empty", vf.path)
	}
	cfg, err := verify.ParseConfig(vf.path, cb)
	if err != nil {
		return false, fmt.Errorf("--verification-path: %w", err)
	}
	opts := verify.Options{Registry: vf.client}
	if vf.trustPath != "" {
		tr, err := verify.ParseTrustRoot(vf.trustPath, tb)
		if err != nil {
			return false, fmt.Errorf("--sigstore-trust-config: %w", err)
		}
		opts.TrustRoot = tr
	} else if cfg.NeedsTrustRoot() {
		tr, err := verify.FetchPublicGood("")
		if err != nil {
			return false, err
		}
		opts.TrustRoot = tr
	}
	v, err := verify.New(cfg, opts)
	if err != nil {
		return false, fmt.Errorf("--verification-path: %w", err)
	}
	vf.v.Store(v)
	vf.cfgBytes, vf.trustBytes = cb, tb
	return true, nil
}

// Fetch verifies and fetches with the current Verifier.
func (vf *verification) Fetch(ctx context.Context, uri string) ([]byte, string, error) {
	f := verify.Fetcher{Verifier: vf.v.Load(), Inner: vf.inner}
	return f.Fetch(ctx, uri)
}

// watch reloads the policies when the config or trust root files change,
// until ctx ends. A change that does not load is logged, and the current
// Verifier stays.
// A rejected change (an empty or half-written file included) is reported as
// the server reports a rejected policies.yml (srv.RejectConfig: /policies'
// lastReload, a metric) and read again at the next poll.
func (vf *verification) watch(ctx context.Context, srv *server.Server) {
	const trigger = "verification config"
	t := time.NewTicker(verificationPoll)
	defer t.Stop()
	rejected := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := vf.load()
		if err != nil {
			if !rejected {
				srv.RejectConfig(trigger, nil, fmt.Errorf("the verification config change is rejected, the previous one stays: %w", err))
			}
			rejected = true
			continue
		}
		if changed {
			vf.log.Info("verification config changed: verifying every module again", "config", vf.path)
			go srv.Reload(ctx, trigger, true) // the server logs the outcome
		} else if rejected {
			go srv.Reload(ctx, trigger, false) // back to the serving one: clears the rejection
		}
		rejected = false
	}
}

// verifiedModules refuses, when verification is on, the modules that cannot
// carry signatures: paths, file://, http(s)://. Built-in modules are part
// of the binary and load as usual.
type verifiedModules struct {
	inner server.DigestResolver
}

func withVerifiedModules(r server.DigestResolver, on bool) server.DigestResolver {
	if !on {
		return r
	}
	return verifiedModules{inner: r}
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

func (v verifiedModules) ResolveDigest(ctx context.Context, uri string) ([]byte, string, error) {
	if err := v.check(uri); err != nil {
		return nil, "", err
	}
	return v.inner.ResolveDigest(ctx, uri)
}
