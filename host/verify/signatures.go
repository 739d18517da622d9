package verify

import (
	"bytes"
	"context"
	"crypto"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	cbundle "github.com/sigstore/cosign/v3/pkg/cosign/bundle"
	cosignoci "github.com/sigstore/cosign/v3/pkg/oci"
	"github.com/sigstore/cosign/v3/pkg/oci/static"
	sgbundle "github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/tollgate-dev/tollgate/host/oci"
)

// Media types and annotations of cosign's formats.
const (
	simpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	annSignature           = "dev.cosignproject.cosign/signature"
	annCertificate         = "dev.sigstore.cosign/certificate"
	annChain               = "dev.sigstore.cosign/chain"
	annBundle              = "dev.sigstore.cosign/bundle"
	annTimestamp           = "dev.sigstore.cosign/rfc3161timestamp"
	bundleMediaTypePrefix  = "application/vnd.dev.sigstore.bundle"
	bundleArtifactType     = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// cosignSignPredicate is the predicate of `cosign sign`'s v3 bundles.
	cosignSignPredicate = "https://sigstore.dev/cosign/sign/v1"
	inTotoPayloadType   = "application/vnd.in-toto+json"
)

// sig is one signature of a module: a layer of the .sig manifest, or a
// Sigstore bundle referrer.
type sig struct {
	where string // ".sig layer 0", "bundle sha256:…"

	legacy   cosignoci.Signature // .sig layer
	hasCert  bool
	optional map[string]any // the payload's optional map (.sig only)

	bundle *sgbundle.Bundle // referrer

	// keyless verification (verifyKeyless): the certificate's identity, or
	// why the signature is not a valid keyless one.
	keylessDone bool
	identity    *certificate.Summary
	keylessErr  error
}

func (s *sig) String() string {
	if s.identity != nil {
		return fmt.Sprintf("%s (subject %q, issuer %q)", s.where, s.identity.SubjectAlternativeName, s.identity.Extensions.Issuer)
	}
	return s.where
}

// signatures reads the .sig layers and the bundle referrers of ref. A 404
// for the .sig tag (or no referrers) means none of that kind.
func (v *Verifier) signatures(ctx context.Context, ref oci.Reference) ([]*sig, error) {
	reg := v.opts.Registry
	var out []*sig
	sigRef := oci.Reference{Registry: ref.Registry, Repository: ref.Repository, Tag: sigTag(ref.Digest)}
	_, raw, err := reg.Manifest(ctx, sigRef.String())
	switch {
	case errors.Is(err, oci.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %v", ErrSignatures, ref, err)
	default:
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%w: %s: manifest %s is not an OCI manifest: %v", ErrSignatures, ref, sigRef.Tag, err)
		}
		for i, l := range m.Layers {
			if l.MediaType != simpleSigningMediaType {
				continue
			}
			if len(out) >= v.opts.MaxSignatures {
				return nil, fmt.Errorf("%w: %s: more than %d signatures", ErrSignatures, ref, v.opts.MaxSignatures)
			}
			s, err := legacySig(ctx, reg, sigRef, i, l)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %s layer %d: %v", ErrSignatures, ref, sigRef.Tag, i, err)
			}
			out = append(out, s)
		}
	}
	refs, err := reg.Referrers(ctx, ref.String(), "")
	if err != nil && !errors.Is(err, oci.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s: %v", ErrSignatures, ref, err)
	}
	for _, d := range refs {
		// The referrer's artifactType is the bundle's, but some registries
		// index it as the empty config's: look at the layers of both.
		if d.ArtifactType != "" && !strings.HasPrefix(d.ArtifactType, bundleMediaTypePrefix) && d.ArtifactType != ocispec.MediaTypeEmptyJSON {
			continue
		}
		mref := oci.Reference{Registry: ref.Registry, Repository: ref.Repository, Digest: d.Digest.String()}
		_, raw, err := reg.Manifest(ctx, mref.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %s: referrer %s: %v", ErrSignatures, ref, d.Digest, err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%w: %s: referrer %s is not an OCI manifest: %v", ErrSignatures, ref, d.Digest, err)
		}
		if m.Subject == nil || m.Subject.Digest.String() != ref.Digest {
			continue // not about this manifest
		}
		for _, l := range m.Layers {
			if !strings.HasPrefix(l.MediaType, bundleMediaTypePrefix) {
				continue
			}
			if len(out) >= v.opts.MaxSignatures {
				return nil, fmt.Errorf("%w: %s: more than %d signatures", ErrSignatures, ref, v.opts.MaxSignatures)
			}
			b, err := reg.Blob(ctx, mref.String(), l)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: bundle %s: %v", ErrSignatures, ref, d.Digest, err)
			}
			s := &sig{where: "bundle " + d.Digest.String()}
			var bd sgbundle.Bundle
			if err := bd.UnmarshalJSON(b); err != nil {
				// A malformed bundle is a signature that verifies nothing.
				s.keylessDone, s.keylessErr = true, fmt.Errorf("not a Sigstore bundle: %v", err)
			} else {
				s.bundle = &bd
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// legacySig reads layer i of a .sig manifest into cosign's Signature.
func legacySig(ctx context.Context, reg Registry, sigRef oci.Reference, i int, l ocispec.Descriptor) (*sig, error) {
	payload, err := reg.Blob(ctx, sigRef.String(), l)
	if err != nil {
		return nil, err
	}
	a := l.Annotations
	var opts []static.Option
	cert, chain := a[annCertificate], a[annChain]
	if cert != "" {
		opts = append(opts, static.WithCertChain([]byte(cert), []byte(chain)))
	}
	if b := a[annBundle]; b != "" {
		var rb cbundle.RekorBundle
		if err := json.Unmarshal([]byte(b), &rb); err != nil {
			return nil, fmt.Errorf("annotation %s is not a Rekor bundle: %v", annBundle, err)
		}
		opts = append(opts, static.WithBundle(&rb))
	}
	if t := a[annTimestamp]; t != "" {
		var ts cbundle.RFC3161Timestamp
		if err := json.Unmarshal([]byte(t), &ts); err != nil {
			return nil, fmt.Errorf("annotation %s is not an RFC 3161 timestamp: %v", annTimestamp, err)
		}
		opts = append(opts, static.WithRFC3161Timestamp(&ts))
	}
	s, err := static.NewSignature(payload, a[annSignature], opts...)
	if err != nil {
		return nil, err
	}
	out := &sig{where: fmt.Sprintf("%s layer %d", sigRef.Tag, i), legacy: s, hasCert: cert != ""}
	var p struct {
		Optional map[string]any `json:"optional"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&p); err == nil {
		out.optional = p.Optional
	}
	return out, nil
}

func manifestHash(dgst string) (v1.Hash, error) { return v1.NewHash(dgst) }

// verifyKeyless checks a keyless signature once: for a .sig layer, cosign's
// verification (certificate chain to a trusted Fulcio CA, Rekor bundle SET
// against a trusted log, certificate valid at the entry's integrated time,
// payload naming the digest); for a bundle, sigstore-go's (the same, with
// the inclusion proof, plus the in-toto subject and cosign's predicate).
func (s *sig) verifyKeyless(ctx context.Context, dgst string, tm root.TrustedMaterial) {
	if s.keylessDone {
		return
	}
	s.keylessDone = true
	switch {
	case s.legacy != nil:
		if !s.hasCert {
			s.keylessErr = errors.New("signed with a key, not a certificate")
			return
		}
		h, err := manifestHash(dgst)
		if err != nil {
			s.keylessErr = err
			return
		}
		co := &cosign.CheckOpts{
			TrustedMaterial: tm,
			ClaimVerifier:   cosign.SimpleClaimVerifier,
			Offline:         true, // the Rekor bundle annotation or nothing
			// As Kubewarden: the Rekor entry is the transparency proof; SCTs
			// (CT log of the CA's issuance) are not required.
			IgnoreSCT: true,
		}
		if _, err := cosign.VerifyImageSignature(ctx, s.legacy, h, co); err != nil {
			s.keylessErr = keylessReason(err)
			return
		}
		cert, err := s.legacy.Cert()
		if err != nil || cert == nil {
			s.keylessErr = fmt.Errorf("certificate: %v", err)
			return
		}
		sum, err := certificate.SummarizeCertificate(cert)
		if err != nil {
			s.keylessErr = fmt.Errorf("certificate: %v", err)
			return
		}
		s.identity = &sum
	case s.bundle != nil:
		raw, err := hex.DecodeString(strings.TrimPrefix(dgst, "sha256:"))
		if err != nil {
			s.keylessErr = err
			return
		}
		vc, err := s.bundle.VerificationContent()
		if err != nil {
			s.keylessErr = err
			return
		}
		if vc.Certificate() == nil {
			s.keylessErr = errors.New("bundle is signed with a key, not a certificate (pubKey entries match only .sig signatures)")
			return
		}
		sv, err := sgverify.NewVerifier(tm, sgverify.WithTransparencyLog(1), sgverify.WithIntegratedTimestamps(1))
		if err != nil {
			s.keylessErr = err
			return
		}
		res, err := sv.Verify(s.bundle, sgverify.NewPolicy(sgverify.WithArtifactDigest("sha256", raw), sgverify.WithoutIdentitiesUnsafe()))
		if err != nil {
			s.keylessErr = keylessReason(err)
			return
		}
		if res.Statement == nil || res.Statement.PredicateType != cosignSignPredicate {
			pt := "none"
			if res.Statement != nil {
				pt = res.Statement.PredicateType
			}
			s.keylessErr = fmt.Errorf("bundle predicateType is %s, not cosign's signature %s", pt, cosignSignPredicate)
			return
		}
		if res.Signature == nil || res.Signature.Certificate == nil {
			s.keylessErr = errors.New("bundle has no certificate identity")
			return
		}
		s.identity = res.Signature.Certificate
	}
}

// keylessReason shortens library errors to what a user acts on.
func keylessReason(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "x509: certificate signed by unknown authority"), strings.Contains(msg, "leaf certificate verification failed"):
		return fmt.Errorf("certificate does not chain to a trusted Fulcio CA of the trust root: %v", err)
	case strings.Contains(msg, "invalid or missing digest in claim"):
		return fmt.Errorf("the signature is for another manifest: %v", err)
	}
	return err
}

// satisfies returns "" when the signature satisfies the entry, else why not.
func (s *sig) satisfies(ctx context.Context, e *Entry, dgst string) string {
	if e.Kind == KindPubKey {
		if s.legacy == nil {
			return "a Sigstore bundle: pubKey entries match only .sig signatures"
		}
		if s.hasCert {
			return "keyless (certificate), not signed with this key"
		}
		h, err := manifestHash(dgst)
		if err != nil {
			return err.Error()
		}
		sv, err := signature.LoadVerifier(e.key, crypto.SHA256)
		if err != nil {
			return "key: " + err.Error()
		}
		co := &cosign.CheckOpts{SigVerifier: sv, IgnoreTlog: true, ClaimVerifier: cosign.SimpleClaimVerifier}
		if _, err := cosign.VerifyImageSignature(ctx, s.legacy, h, co); err != nil {
			if strings.Contains(err.Error(), "invalid or missing digest in claim") {
				return "the signature is for another manifest: " + err.Error()
			}
			return "not signed with this key: " + err.Error()
		}
		return s.annotationsMatch(e)
	}
	if s.keylessErr != nil {
		return s.keylessErr.Error()
	}
	if s.identity == nil {
		return "keyless signature not verified"
	}
	id := s.identity
	switch e.Kind {
	case KindGenericIssuer:
		if id.Extensions.Issuer != e.Issuer {
			return fmt.Sprintf("issuer is %q, want %q", id.Extensions.Issuer, e.Issuer)
		}
		if e.Subject.Equal != "" && id.SubjectAlternativeName != e.Subject.Equal {
			return fmt.Sprintf("subject is %q, want %q", id.SubjectAlternativeName, e.Subject.Equal)
		}
		if e.Subject.URLPrefix != "" && !strings.HasPrefix(id.SubjectAlternativeName, e.Subject.URLPrefix) {
			return fmt.Sprintf("subject %q does not start with %q", id.SubjectAlternativeName, e.Subject.URLPrefix)
		}
	case KindGithubAction:
		if id.Extensions.Issuer != GitHubIssuer {
			return fmt.Sprintf("issuer is %q, not GitHub Actions' %q", id.Extensions.Issuer, GitHubIssuer)
		}
		if !strings.HasPrefix(id.SubjectAlternativeName, "https://github.com/") {
			return fmt.Sprintf("subject %q is not a github.com workflow URI", id.SubjectAlternativeName)
		}
		repo := id.Extensions.GithubWorkflowRepository
		if repo == "" {
			repo = strings.TrimPrefix(id.Extensions.SourceRepositoryURI, "https://github.com/")
		}
		if repo == "" {
			return "certificate names no GitHub repository (OID 1.3.6.1.4.1.57264.1.5 or .12)"
		}
		owner, name, _ := strings.Cut(repo, "/")
		if owner != e.Owner {
			return fmt.Sprintf("repository %q is not owned by %q", repo, e.Owner)
		}
		if e.Repo != "" && name != e.Repo {
			return fmt.Sprintf("repository is %q, want %q", repo, e.Owner+"/"+e.Repo)
		}
	}
	return s.annotationsMatch(e)
}

// annotationsMatch checks the entry's annotations against the payload's
// optional map (values compared as text, so 1 matches "1").
func (s *sig) annotationsMatch(e *Entry) string {
	if len(e.Annotations) == 0 {
		return ""
	}
	if s.legacy == nil {
		return "a Sigstore bundle carries no annotations, and the entry requires some"
	}
	for _, k := range slices.Sorted(maps.Keys(e.Annotations)) {
		want := e.Annotations[k]
		got, ok := s.optional[k]
		if !ok {
			return fmt.Sprintf("annotation %q missing from the signature", k)
		}
		if g := fmt.Sprint(got); g != want {
			return fmt.Sprintf("annotation %q is %q, want %q", k, g, want)
		}
	}
	return ""
}
