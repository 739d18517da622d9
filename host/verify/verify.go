package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/tollgate-dev/tollgate/host/oci"
)

// Sentinel errors: every verification failure wraps one of these (and
// ErrConfig, ErrTrustRoot, or host/oci's for a bad reference).
var (
	// ErrUnsigned: the module has no signature at all (no sha256-<hex>.sig
	// tag and no Sigstore bundle referrer).
	ErrUnsigned = errors.New("module is not signed")
	// ErrNotSatisfied: signatures exist, but they do not satisfy the
	// config; the *Error says which requirement failed and why.
	ErrNotSatisfied = errors.New("signatures do not satisfy the verification config")
	// ErrSignatures: the registry did not give the signatures (other than
	// by not having them): unreachable, unauthorized, malformed manifest.
	ErrSignatures = errors.New("cannot read the module's signatures")
	// ErrNotRegistry: a module that is not in a registry cannot carry signatures.
	ErrNotRegistry = errors.New("module is not a registry:// module")
)

// Registry is what Verify reads from a registry (implemented by
// *host/oci.Client): a 404 must be an error wrapping oci.ErrNotFound.
type Registry interface {
	Resolve(ctx context.Context, uri string) (string, error)
	Manifest(ctx context.Context, uri string) (ocispec.Descriptor, []byte, error)
	Blob(ctx context.Context, uri string, desc ocispec.Descriptor) ([]byte, error)
	Referrers(ctx context.Context, uri, artifactType string) ([]ocispec.Descriptor, error)
}

// Options configure a Verifier.
type Options struct {
	// Registry reads signatures (required).
	Registry Registry
	// TrustRoot is the Sigstore trust root (Fulcio CAs, Rekor logs) that
	// keyless signatures must chain to. Required when the config has a
	// genericIssuer or githubAction entry; unused for pubKey-only configs.
	TrustRoot root.TrustedMaterial
	// MaxSignatures bounds the signature layers and bundles read per module
	// (0 = 64).
	MaxSignatures int
}

// Verifier verifies modules against one config. It caches verified digests;
// it is safe for concurrent use.
type Verifier struct {
	cfg  *Config
	opts Options

	mu    sync.Mutex
	cache map[string]Result // by manifest digest: verified only
}

// maxCache bounds the verified-digest cache (it is emptied when full).
const maxCache = 4096

// New makes a Verifier. A config with keyless entries and no trust root is
// an error: keyless verification fails closed.
func New(cfg *Config, opts Options) (*Verifier, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: no config", ErrConfig)
	}
	if opts.Registry == nil {
		return nil, errors.New("verify: no registry client")
	}
	if opts.TrustRoot == nil && cfg.NeedsTrustRoot() {
		return nil, fmt.Errorf("%w: the verification config has keyless entries (genericIssuer, githubAction) and no trust root was given", ErrTrustRoot)
	}
	if opts.MaxSignatures <= 0 {
		opts.MaxSignatures = 64
	}
	return &Verifier{cfg: cfg, opts: opts, cache: map[string]Result{}}, nil
}

// Config is the verifier's config.
func (v *Verifier) Config() *Config { return v.cfg }

// Result is a verified module.
type Result struct {
	// URI is the module's URI pinned to the verified digest
	// (registry://host/repo:tag@sha256:...): fetch this, not the tag.
	URI string
	// Digest is the verified manifest digest.
	Digest string
	// Satisfied describes, for each satisfied entry, the signature that did.
	Satisfied []string
	// Cached: the digest was verified before; no signature was read.
	Cached bool
}

// Failure is one unsatisfied requirement and why each signature did not
// satisfy it.
type Failure struct {
	Entry   string // e.g. `allOf[0] githubAction owner "acme"`
	Reasons []string
}

// Error is a module that does not satisfy the config.
type Error struct {
	URI    string
	Digest string
	// Failures are the unsatisfied allOf entries, or (when anyOf fell short)
	// its unsatisfied signatures.
	Failures []Failure
	// AnyOf: matched of minimum, when anyOf fell short.
	AnyOfMatched, AnyOfMinimum int
	anyOfShort                 bool
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %v:", e.URI, e.Digest, ErrNotSatisfied)
	if e.anyOfShort {
		fmt.Fprintf(&b, " anyOf: %d of minimumMatches %d satisfied;", e.AnyOfMatched, e.AnyOfMinimum)
	}
	for i, f := range e.Failures {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s: not satisfied", f.Entry)
		if len(f.Reasons) > 0 {
			b.WriteString(": " + strings.Join(f.Reasons, ", "))
		}
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrNotSatisfied }

// Verify checks that the registry:// module uri satisfies the config. A
// tag is resolved once; the result's URI is pinned to the digest that was
// verified. Verified digests are cached: verifying one again costs a map
// lookup (plus, for a tag, the registry's answer to which digest it names).
func (v *Verifier) Verify(ctx context.Context, uri string) (Result, error) {
	ref, err := oci.ParseURI(uri)
	if err != nil {
		if errors.Is(err, oci.ErrUnknownScheme) {
			return Result{}, fmt.Errorf("%w: %q: a verification config is set and only registry:// modules carry signatures", ErrNotRegistry, uri)
		}
		return Result{}, err
	}
	if ref.Digest == "" {
		d, err := v.opts.Registry.Resolve(ctx, uri)
		if err != nil {
			return Result{}, err
		}
		ref.Digest = d
	}
	pinned := ref.String()
	v.mu.Lock()
	r, ok := v.cache[ref.Digest]
	v.mu.Unlock()
	if ok {
		r.URI, r.Cached = pinned, true
		return r, nil
	}
	r, err = v.verify(ctx, ref)
	if err != nil {
		return Result{}, err
	}
	v.mu.Lock()
	if len(v.cache) >= maxCache {
		clear(v.cache)
	}
	v.cache[ref.Digest] = r
	v.mu.Unlock()
	return r, nil
}

// verify reads the signatures of ref (pinned) and evaluates the config.
func (v *Verifier) verify(ctx context.Context, ref oci.Reference) (Result, error) {
	sigs, err := v.signatures(ctx, ref)
	if err != nil {
		return Result{}, err
	}
	if len(sigs) == 0 {
		return Result{}, fmt.Errorf("%w: %s (%s): the registry has no tag %s and no Sigstore bundle referring to it",
			ErrUnsigned, ref, ref.Digest, sigTag(ref.Digest))
	}
	// Keyless signatures are verified once (chain, tlog, time), then
	// matched against each entry's identity.
	if v.opts.TrustRoot != nil && v.cfg.NeedsTrustRoot() {
		for _, s := range sigs {
			s.verifyKeyless(ctx, ref.Digest, v.opts.TrustRoot)
		}
	}
	res := Result{URI: ref.String(), Digest: ref.Digest}
	e := &Error{URI: ref.String(), Digest: ref.Digest}
	check := func(en *Entry) (ok bool, f Failure) {
		f.Entry = en.String()
		for _, s := range sigs {
			reason := s.satisfies(ctx, en, ref.Digest)
			if reason == "" {
				res.Satisfied = append(res.Satisfied, en.String()+": "+s.String())
				return true, Failure{}
			}
			f.Reasons = append(f.Reasons, s.String()+": "+reason)
		}
		return false, f
	}
	for i := range v.cfg.AllOf {
		if ok, f := check(&v.cfg.AllOf[i]); !ok {
			e.Failures = append(e.Failures, f)
		}
	}
	if a := v.cfg.AnyOf; a != nil {
		var short []Failure
		matched := 0
		for i := range a.Signatures {
			if ok, f := check(&a.Signatures[i]); ok {
				matched++
			} else {
				short = append(short, f)
			}
		}
		if matched < a.MinimumMatches {
			e.anyOfShort, e.AnyOfMatched, e.AnyOfMinimum = true, matched, a.MinimumMatches
			e.Failures = append(e.Failures, short...)
		}
	}
	if len(e.Failures) > 0 || e.anyOfShort {
		return Result{}, e
	}
	return res, nil
}

// sigTag is cosign's signature tag for a manifest digest.
func sigTag(dgst string) string {
	return strings.Replace(dgst, ":", "-", 1) + ".sig"
}
