package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/internal/redact"
)

// verifyFlags are kwctl's verification flags.
type verifyFlags struct {
	configPath  string
	keys        []string
	annotations []string
	certEmail   string
	certIssuer  string
	ghOwner     string
	ghRepo      string
	trustConfig string
}

func (f *verifyFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.configPath, "verification-config-path", "", "Kubewarden verification config (default "+defaultVerificationConfigPath()+" when present)")
	fs.StringSliceVarP(&f.keys, "verification-key", "k", nil, "public key (PEM file) that must have signed the module (repeatable)")
	fs.StringArrayVarP(&f.annotations, "verification-annotation", "a", nil, "KEY=VALUE annotation the signatures must carry (repeatable)")
	fs.StringVar(&f.certEmail, "cert-email", "", "e-mail of the keyless signer's certificate (with --cert-oidc-issuer)")
	fs.StringVar(&f.certIssuer, "cert-oidc-issuer", "", "OIDC issuer of the keyless signer's certificate (with --cert-email)")
	fs.StringVar(&f.ghOwner, "github-owner", "", "GitHub owner whose Actions workflow must have signed the module")
	fs.StringVar(&f.ghRepo, "github-repo", "", "GitHub repository (with --github-owner)")
	fs.StringVar(&f.trustConfig, "sigstore-trust-config", "", "Sigstore ClientTrustConfig or trusted_root.json for keyless signatures (default: the public-good root through Sigstore's TUF repository)")
}

// defaultVerificationConfigPath is read by verify when no flag says what to require.
func defaultVerificationConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "verification-config.yml"
	}
	return filepath.Join(dir, "tollgate", "verification-config.yml")
}

// config builds the verification config from the flags, or reads the
// config file (the flag's, else the default one); nil when there is none.
func (f *verifyFlags) config() (*verify.Config, error) {
	vf := verify.Flags{Keys: f.keys, CertEmail: f.certEmail, CertIssuer: f.certIssuer, GitHubOwner: f.ghOwner, GitHubRepo: f.ghRepo}
	for _, a := range f.annotations {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--verification-annotation %q: want KEY=VALUE", a)
		}
		if vf.Annotations == nil {
			vf.Annotations = map[string]string{}
		}
		vf.Annotations[k] = v
	}
	if !vf.Empty() {
		if f.configPath != "" {
			return nil, errors.New("--verification-config-path cannot be combined with -k, -a, --cert-email, --cert-oidc-issuer, --github-owner or --github-repo")
		}
		return verify.ConfigFromFlags(vf)
	}
	if f.configPath != "" {
		return verify.LoadConfig(f.configPath)
	}
	if p := defaultVerificationConfigPath(); fileExists(p) {
		return verify.LoadConfig(p)
	}
	return nil, nil
}

// explicit reports whether a flag (not the default config file) asks for verification.
func (f *verifyFlags) explicit() bool {
	return f.configPath != "" || len(f.keys) > 0 || len(f.annotations) > 0 || f.certEmail != "" || f.certIssuer != "" || f.ghOwner != "" || f.ghRepo != ""
}

// verifier is the verifier the flags ask for, reading signatures through
// reg; nil (and no error) when neither a flag nor the default config file
// asks for verification (pull, run and bench then do not verify; verify
// refuses).
func (f *verifyFlags) verifier(reg verify.Registry) (*verify.Verifier, error) {
	cfg, err := f.config()
	if err != nil || cfg == nil {
		return nil, err
	}
	tr, err := trustRoot(f.trustConfig, cfg)
	if err != nil {
		return nil, err
	}
	opts := verify.Options{Registry: reg}
	if tr != nil {
		opts.TrustRoot = tr
	}
	return verify.New(cfg, opts)
}

// guard makes resolver fetch registry:// modules only once verified, when
// the flags (or the default config file) ask for verification, as kwctl's
// run and bench do. A module that is not in a registry carries no signature:
// with a verification flag it is refused rather than run unverified;
// builtin:// modules are part of the binary and load.
func (f *verifyFlags) guard(resolver *module.Resolver, uri string) error {
	switch {
	case strings.HasPrefix(uri, "builtin://"):
		return nil
	case !strings.HasPrefix(uri, "registry://"):
		if f.explicit() {
			return fmt.Errorf("%s: only registry:// modules carry signatures to verify; drop the verification flags to run a module that is not in a registry", redact.URI(uri))
		}
		return nil
	}
	reg := registryOf(resolver)
	if reg == nil {
		return errors.New("verification: registry:// modules are not fetched by tollgate's registry client here")
	}
	c, err := reg.Client()
	if err != nil {
		return err
	}
	v, err := f.verifier(c)
	if err != nil || v == nil {
		return err
	}
	resolver.Registry = &verify.Fetcher{Verifier: v, Inner: reg}
	return nil
}

// verifyError is a verification failure as the CLI reports it: exit status
// 1 with each unsatisfied requirement on its own line.
func verifyError(err error) error {
	var ve *verify.Error
	if errors.As(err, &ve) {
		return &exitError{code: 1, msg: formatVerifyError(ve)}
	}
	return err
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// trustRoot loads --sigstore-trust-config, or (keyless entries only) the
// public-good root through TUF; nil when the config needs none.
func trustRoot(path string, cfg *verify.Config) (*root.TrustedRoot, error) {
	if path != "" {
		tr, err := verify.LoadTrustRoot(path)
		if err != nil {
			return nil, fmt.Errorf("--sigstore-trust-config: %w", err)
		}
		return tr, nil
	}
	if !cfg.NeedsTrustRoot() {
		return nil, nil
	}
	return verify.FetchPublicGood("")
}

func newVerifyCmd() *cobra.Command {
	var (
		oflags ociFlags
		vflags verifyFlags
	)
	cmd := &cobra.Command{
		Use:   "verify registry://HOST/REPOSITORY[:TAG][@sha256:DIGEST]",
		Short: "Verify a policy module's Sigstore signatures against a verification config",
		Long: `verify checks that a policy module in an OCI registry was signed as a
Kubewarden verification config requires (apiVersion v1: allOf, anyOf with
minimumMatches; pubKey, genericIssuer and githubAction entries with optional
annotations), reading cosign's signatures (the sha256-<digest>.sig tag, key-based
or keyless with the Rekor bundle) and Sigstore bundles attached as OCI referrers.

The requirements come from --verification-config-path, or from the flags
(-k, -a, --cert-email with --cert-oidc-issuer, --github-owner [--github-repo],
all of which must hold), or from the default config file when present.
Keyless signatures must chain to the Sigstore trust root: --sigstore-trust-config,
else the public-good root fetched through Sigstore's TUF repository.

Exit status 0 prints the verified manifest digest (pin the module to it);
1 names each requirement that failed and why.`,
		Example: `  tollgate verify registry://ghcr.io/acme/policies/pod-privileged:v1 -k cosign.pub
  tollgate verify registry://ghcr.io/acme/policies/pod-privileged:v1 --github-owner acme --github-repo policies
  tollgate verify registry://registry.example.com/policies/p:v1 --verification-config-path verification.yml \
      --sigstore-trust-config trusted_root.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := oflags.client()
			if err != nil {
				return err
			}
			v, err := vflags.verifier(c)
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("nothing to verify against: give --verification-config-path, -k/--verification-key, --cert-email with --cert-oidc-issuer or --github-owner (or write %s; `tollgate scaffold verification-config` prints one)", defaultVerificationConfigPath())
			}
			r, err := v.Verify(cmd.Context(), args[0])
			if err != nil {
				return verifyError(err)
			}
			for _, s := range r.Satisfied {
				fmt.Fprintln(cmd.ErrOrStderr(), "satisfied:", s)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), r.Digest)
			return err
		},
	}
	oflags.register(cmd.Flags())
	vflags.register(cmd.Flags())
	return cmd
}

// formatVerifyError is a verification failure, one requirement a line.
func formatVerifyError(e *verify.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Error: %s (%s): %v\n", e.URI, e.Digest, verify.ErrNotSatisfied)
	if e.AnyOfMinimum > 0 {
		fmt.Fprintf(&b, "  anyOf: %d of minimumMatches %d satisfied\n", e.AnyOfMatched, e.AnyOfMinimum)
	}
	for _, f := range e.Failures {
		fmt.Fprintf(&b, "  %s: not satisfied\n", f.Entry)
		for _, r := range f.Reasons {
			fmt.Fprintf(&b, "    %s\n", r)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func newScaffoldVerificationConfigCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "verification-config",
		Short: "Print a default verification config (Kubewarden's: signed by the kubewarden GitHub organisation)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), verify.Scaffold)
			return err
		},
	}
}
