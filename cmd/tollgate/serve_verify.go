package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

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

// withVerification wraps serve's registry fetcher so that it fetches only
// modules verified against --verification-path (pinned to the verified
// digest), and reports whether verification is on. A config or trust root
// that cannot be loaded stops serve: nothing is loaded unverified.
func withVerification(cmd *cobra.Command, reg module.RegistryFetcher, logger *slog.Logger) (module.RegistryFetcher, bool, error) {
	path, _ := cmd.Flags().GetString("verification-path")
	trust, _ := cmd.Flags().GetString("sigstore-trust-config")
	if path == "" {
		if trust != "" {
			return nil, false, errors.New("--sigstore-trust-config goes with --verification-path")
		}
		return reg, false, nil
	}
	cfg, err := verify.LoadConfig(path)
	if err != nil {
		return nil, false, fmt.Errorf("--verification-path: %w", err)
	}
	tr, err := trustRoot(trust, cfg)
	if err != nil {
		return nil, false, err
	}
	lr, ok := reg.(*lazyRegistry)
	if !ok {
		return nil, false, fmt.Errorf("--verification-path: registry fetcher %T cannot read signatures", reg)
	}
	client, err := lr.get()
	if err != nil {
		return nil, false, err
	}
	opts := verify.Options{Registry: client}
	if tr != nil {
		opts.TrustRoot = tr
	}
	v, err := verify.New(cfg, opts)
	if err != nil {
		return nil, false, fmt.Errorf("--verification-path: %w", err)
	}
	logger.Info("signature verification on: only verified registry:// modules load", "config", path, "requirements", len(cfg.Entries()))
	return &verify.Fetcher{Verifier: v, Inner: reg}, true, nil
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
	return fmt.Errorf("%w: %q: --verification-path is set, and only registry:// modules (signed) and builtin:// modules load", verify.ErrNotRegistry, uri)
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
