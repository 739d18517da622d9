package verifytest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/runtime"
	"github.com/google/go-containerregistry/pkg/name"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	cbundle "github.com/sigstore/cosign/v3/pkg/cosign/bundle"
	cosignoci "github.com/sigstore/cosign/v3/pkg/oci"
	"github.com/sigstore/cosign/v3/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	"github.com/sigstore/cosign/v3/pkg/oci/static"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/rekor/pkg/generated/models"
	"github.com/sigstore/rekor/pkg/pki"
	"github.com/sigstore/rekor/pkg/types"
	"github.com/sigstore/rekor/pkg/types/hashedrekord"
	_ "github.com/sigstore/rekor/pkg/types/hashedrekord/v0.0.1" // registers the entry type
	sgbundle "github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Key is a cosign key pair (cosign.GenerateKeyPair).
type Key struct {
	// PublicPEM is the public key; PublicPath a file holding it.
	PublicPEM  []byte
	PublicPath string
	signer     signature.SignerVerifier
}

// NewKey generates a cosign key pair, as `cosign generate-key-pair` does.
func NewKey(t testing.TB) *Key {
	t.Helper()
	pass := func(bool) ([]byte, error) { return []byte("test"), nil }
	kb, err := cosign.GenerateKeyPair(pass)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := cosign.LoadPrivateKey(kb.PrivateBytes, []byte("test"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(p, kb.PublicBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return &Key{PublicPEM: kb.PublicBytes, PublicPath: p, signer: sv}
}

// Sigstore is a virtual Sigstore: Fulcio CAs (sigstore-go's test CA
// helpers) and a Rekor log (sigstore-go's VirtualSigstore), with the
// trusted root that names them.
type Sigstore struct {
	VS *ca.VirtualSigstore
	// TrustRootPath is a trusted_root.json naming the CA and the log.
	TrustRootPath string

	root, inter *x509.Certificate
	interKey    *ecdsa.PrivateKey
	trusted     *root.TrustedRoot
}

// NewSigstore makes a virtual Sigstore and writes its trusted root.
func NewSigstore(t testing.TB) *Sigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	s := &Sigstore{VS: vs}
	s.root, s.inter, s.interKey = newCA(t)
	fulcio := &root.FulcioCertificateAuthority{
		Root: s.root, Intermediates: []*x509.Certificate{s.inter}, URI: "https://fulcio.test",
		ValidityPeriodStart: time.Now().Add(-time.Hour), ValidityPeriodEnd: time.Now().Add(time.Hour),
	}
	cas := append([]root.CertificateAuthority{fulcio}, vs.FulcioCertificateAuthorities()...)
	s.trusted, err = root.NewTrustedRoot(root.TrustedRootMediaType01, cas, rawIDs(t, vs.CTLogs()), nil, rawIDs(t, vs.RekorLogs()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.trusted.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	s.TrustRootPath = filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(s.TrustRootPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// rawIDs gives the virtual Sigstore's logs their log IDs as bytes (it keeps
// them as hex text, which would not survive trusted_root.json).
func rawIDs(t testing.TB, logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
	t.Helper()
	out := map[string]*root.TransparencyLog{}
	for id, l := range logs {
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		c := *l
		c.ID = raw
		out[id] = &c
	}
	return out
}

// TrustedRoot is the trusted root as sigstore-go reads it.
func (s *Sigstore) TrustedRoot() *root.TrustedRoot { return s.trusted }

// newCA makes a Fulcio-like root and intermediate (sigstore-go's helpers).
func newCA(t testing.TB) (*x509.Certificate, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	rc, rk, err := ca.GenerateRootCa()
	if err != nil {
		t.Fatal(err)
	}
	ic, ik, err := ca.GenerateFulcioIntermediate(rc, rk)
	if err != nil {
		t.Fatal(err)
	}
	return rc, ic, ik
}

// Identity is what a Fulcio certificate says of its holder.
type Identity struct {
	// Email or URI is the subject (SAN).
	Email, URI string
	// Issuer is the OIDC issuer (OID .1.1 and .1.8).
	Issuer string
	// Repository is GitHub's owner/repo (OID .1.5 and .1.12).
	Repository string
	// NotBefore (zero = now) and Lifetime (zero = 10 minutes, as Fulcio's).
	NotBefore time.Time
	Lifetime  time.Duration
}

var (
	oidIssuerV1   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}
	oidRepository = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 5}
	oidIssuerV2   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}
	oidSourceRepo = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 12}
)

// leaf issues a Fulcio-style code-signing certificate for id from the
// given intermediate.
func leaf(t testing.TB, id Identity, inter *x509.Certificate, interKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	nb := id.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-time.Second)
	}
	life := id.Lifetime
	if life == 0 {
		life = 10 * time.Minute
	}
	der := func(s string) []byte {
		b, err := asn1.MarshalWithParams(s, "utf8")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		NotBefore:    nb, NotAfter: nb.Add(life),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		ExtraExtensions: []pkix.Extension{
			{Id: oidIssuerV1, Value: []byte(id.Issuer)},
			{Id: oidIssuerV2, Value: der(id.Issuer)},
		},
	}
	if id.Email != "" {
		tmpl.EmailAddresses = []string{id.Email}
	}
	if id.URI != "" {
		u, err := url.Parse(id.URI)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	if id.Repository != "" {
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions,
			pkix.Extension{Id: oidRepository, Value: []byte(id.Repository)},
			pkix.Extension{Id: oidSourceRepo, Value: der("https://github.com/" + id.Repository)})
	}
	b, err := x509.CreateCertificate(rand.Reader, tmpl, inter, &key.PublicKey, interKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// Digest is a pushed manifest as go-containerregistry names it.
func Digest(t testing.TB, host, repo, dgst string) name.Digest {
	t.Helper()
	d, err := name.NewDigest(host+"/"+repo+"@"+dgst, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// cosignPayload is cosign's simple-signing payload for d
// (sigstore/sigstore's payload package).
func cosignPayload(t testing.TB, d name.Digest, annotations map[string]any) []byte {
	t.Helper()
	b, err := payload.Cosign{Image: d, Annotations: annotations}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// attach adds sig to the sha256-<hex>.sig manifest of d (cosign's mutate
// and remote packages: existing signatures are kept).
func attach(t testing.TB, d name.Digest, sig cosignoci.Signature) {
	t.Helper()
	se := ociremote.SignedUnknown(d)
	se, err := mutate.AttachSignatureToEntity(se, sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociremote.WriteSignatures(d.Repository, se); err != nil {
		t.Fatal(err)
	}
}

// SignKey attaches a key-based cosign signature of d, with annotations in
// the payload's optional map (cosign sign --key -a).
func (k *Key) SignKey(t testing.TB, d name.Digest, annotations map[string]any) {
	t.Helper()
	k.SignKeyClaiming(t, d, d, annotations)
}

// SignKeyClaiming attaches to d's signature tag a key-based signature whose
// payload names claim: a signature copied from another manifest.
func (k *Key) SignKeyClaiming(t testing.TB, d, claim name.Digest, annotations map[string]any) {
	t.Helper()
	p := cosignPayload(t, claim, annotations)
	raw, err := k.signer.SignMessage(bytes.NewReader(p))
	if err != nil {
		t.Fatal(err)
	}
	sig, err := static.NewSignature(p, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	attach(t, d, sig)
}

// KeylessOptions vary a keyless signature.
type KeylessOptions struct {
	// Untrusted issues the certificate from a CA that is not in the trust root.
	Untrusted bool
	// IntegratedTime is when Rekor logged it (zero = now).
	IntegratedTime time.Time
	// NoBundle leaves out the Rekor bundle annotation.
	NoBundle bool
	// Annotations go into the payload's optional map.
	Annotations map[string]any
}

// SignKeyless attaches a keyless cosign signature of d: an ephemeral key,
// a Fulcio-style certificate for id, the signature logged in the virtual
// Rekor (hashedrekord entry made by rekor's types, SET signed by the log
// key), the Rekor bundle in the layer annotations, as `cosign sign`
// without a key and with --new-bundle-format=false.
func (s *Sigstore) SignKeyless(t testing.TB, d name.Digest, id Identity, o KeylessOptions) {
	t.Helper()
	rootC, inter, interKey := s.root, s.inter, s.interKey
	if o.Untrusted {
		rootC, inter, interKey = newCA(t)
	}
	cert, key := leaf(t, id, inter, interKey)
	p := cosignPayload(t, d, o.Annotations)
	sv, err := signature.LoadECDSASignerVerifier(key, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sv.SignMessage(bytes.NewReader(p))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := cryptoutils.MarshalCertificateToPEM(cert)
	if err != nil {
		t.Fatal(err)
	}
	chainPEM, err := cryptoutils.MarshalCertificatesToPEM([]*x509.Certificate{inter, rootC})
	if err != nil {
		t.Fatal(err)
	}
	opts := []static.Option{static.WithCertChain(certPEM, chainPEM)}
	if !o.NoBundle {
		it := o.IntegratedTime
		if it.IsZero() {
			it = time.Now()
		}
		opts = append(opts, static.WithBundle(s.rekorBundle(t, p, certPEM, raw, it.Unix())))
	}
	sig, err := static.NewSignature(p, base64.StdEncoding.EncodeToString(raw), opts...)
	if err != nil {
		t.Fatal(err)
	}
	attach(t, d, sig)
}

// rekorBundle logs a hashedrekord entry in the virtual Rekor and returns
// cosign's bundle annotation for it.
func (s *Sigstore) rekorBundle(t testing.TB, p, certPEM, sig []byte, integrated int64) *cbundle.RekorBundle {
	t.Helper()
	ctx := context.Background()
	h := crypto.SHA256.New()
	h.Write(p)
	pe, err := types.NewProposedEntry(ctx, hashedrekord.KIND, "0.0.1", types.ArtifactProperties{
		ArtifactHash:   hex.EncodeToString(h.Sum(nil)),
		SignatureBytes: sig,
		PublicKeyBytes: [][]byte{certPEM},
		PKIFormat:      string(pki.X509),
	})
	if err != nil {
		t.Fatal(err)
	}
	ei, err := types.CreateVersionedEntry(pe)
	if err != nil {
		t.Fatal(err)
	}
	body, err := types.CanonicalizeEntry(ctx, ei)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := models.UnmarshalProposedEntry(bytes.NewReader(body), runtime.JSONConsumer()); err != nil {
		t.Fatal(err)
	}
	logID, err := s.VS.RekorLogID()
	if err != nil {
		t.Fatal(err)
	}
	rp := tlog.RekorPayload{Body: base64.StdEncoding.EncodeToString(body), IntegratedTime: integrated, LogIndex: 42, LogID: logID}
	set, err := s.VS.RekorSignPayload(rp)
	if err != nil {
		t.Fatal(err)
	}
	return &cbundle.RekorBundle{SignedEntryTimestamp: set, Payload: cbundle.RekorPayload{
		Body: rp.Body, IntegratedTime: rp.IntegratedTime, LogIndex: rp.LogIndex, LogID: rp.LogID,
	}}
}

// AttachBundle attaches a Sigstore bundle v0.3 as an OCI referrer of d, as
// cosign v3's `cosign sign` does by default: a DSSE envelope of an in-toto
// statement about d (predicate https://sigstore.dev/cosign/sign/v1), signed
// by the virtual Sigstore's Fulcio certificate for email/issuer, logged in
// its Rekor with an inclusion proof; written with cosign's
// WriteAttestationNewBundleFormat. subject, when not "", replaces d's
// digest in the statement (a bundle about another manifest).
func (s *Sigstore) AttachBundle(t testing.TB, d name.Digest, email, issuer string, subject string) {
	t.Helper()
	if subject == "" {
		subject = d.DigestStr()
	}
	ent, err := s.VS.AttestAtTime(email, issuer, statement(t, subject), time.Now().Add(5*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := ent.VerificationContent()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ent.SignatureContent()
	if err != nil {
		t.Fatal(err)
	}
	env := sc.EnvelopeContent().RawEnvelope()
	var sigs []*protodsse.Signature
	for _, sg := range env.Signatures {
		raw, err := base64.StdEncoding.DecodeString(sg.Sig)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, &protodsse.Signature{Sig: raw, Keyid: sg.KeyID})
	}
	pl, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ent.TlogEntries()
	if err != nil {
		t.Fatal(err)
	}
	pb := &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_Certificate{
				Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw},
			},
			TlogEntries: []*protorekor.TransparencyLogEntry{s.withPromise(t, entries[0].TransparencyLogEntry())},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: pl, PayloadType: env.PayloadType, Signatures: sigs,
		}},
	}
	writeBundle(t, d, pb)
}

// statement is cosign's in-toto statement about a manifest digest.
func statement(t testing.TB, dgst string) []byte {
	t.Helper()
	st := &intoto.Statement{
		Type:          intoto.StatementTypeUri,
		Subject:       []*intoto.ResourceDescriptor{{Digest: map[string]string{"sha256": strings.TrimPrefix(dgst, "sha256:")}}},
		PredicateType: "https://sigstore.dev/cosign/sign/v1",
		Predicate:     &structpb.Struct{},
	}
	b, err := protojson.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeBundle attaches a bundle to d as cosign does (WriteAttestationNewBundleFormat).
func writeBundle(t testing.TB, d name.Digest, pb *protobundle.Bundle) {
	t.Helper()
	b, err := sgbundle.NewBundle(pb)
	if err != nil {
		t.Fatal(err)
	}
	js, err := b.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := ociremote.WriteAttestationNewBundleFormat(d, js, "https://sigstore.dev/cosign/sign/v1"); err != nil {
		t.Fatal(err)
	}
}

// AttachKeyBundle attaches a Sigstore bundle signed with an ephemeral key
// (no certificate, no log entry: sigstore-go's sign.Bundle alone), as
// `cosign sign --key` of cosign v3 writes one (with a key of its own).
func AttachKeyBundle(t testing.TB, d name.Digest) {
	t.Helper()
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := sign.Bundle(&sign.DSSEData{Data: statement(t, d.DigestStr()), PayloadType: "application/vnd.in-toto+json"}, kp, sign.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeBundle(t, d, pb)
}

// withPromise completes the log entry sigstore-go's test entity returns
// with its kind and version (from the logged body) and the SET (signed by
// the virtual Rekor), as Rekor returns them.
func (s *Sigstore) withPromise(t testing.TB, tle *protorekor.TransparencyLogEntry) *protorekor.TransparencyLogEntry {
	t.Helper()
	var kv struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(tle.CanonicalizedBody, &kv); err != nil {
		t.Fatal(err)
	}
	tle.KindVersion = &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion}
	set, err := s.VS.RekorSignPayload(tlog.RekorPayload{
		Body: base64.StdEncoding.EncodeToString(tle.CanonicalizedBody), IntegratedTime: tle.IntegratedTime,
		LogIndex: tle.LogIndex, LogID: hex.EncodeToString(tle.LogId.KeyId),
	})
	if err != nil {
		t.Fatal(err)
	}
	tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
	return tle
}
