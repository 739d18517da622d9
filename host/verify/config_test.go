package verify_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
)

// testKey is a fresh ECDSA P-256 public key in PEM.
func testKey(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cryptoutils.MarshalPublicKeyToPEM(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestParseConfig(t *testing.T) {
	indentedKey := strings.ReplaceAll(testKey(t), "\n", "\n        ")
	good := `apiVersion: v1
allOf:
  - kind: githubAction
    owner: acme
    repo: policies
anyOf:
  minimumMatches: 2
  signatures:
    - kind: pubKey
      owner: alice
      key: |
        ` + indentedKey + `
      annotations: {stage: prod, build: 7}
    - kind: genericIssuer
      issuer: https://id.example.com
      subject: {urlPrefix: https://ci.example.com/acme}
    - kind: genericIssuer
      issuer: https://id.example.com
      subject: {equal: bob@example.com}
`
	c, err := verify.ParseConfig("good.yml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	es := c.Entries()
	if len(es) != 4 || c.AnyOf.MinimumMatches != 2 || !c.NeedsTrustRoot() {
		t.Fatalf("parsed %d entries, minimumMatches %d", len(es), c.AnyOf.MinimumMatches)
	}
	if es[1].Annotations["build"] != "7" || es[1].Owner != "alice" {
		t.Errorf("pubKey entry: %+v", es[1])
	}
	if es[2].Subject.URLPrefix != "https://ci.example.com/acme/" {
		t.Errorf("urlPrefix %q: want a trailing /", es[2].Subject.URLPrefix)
	}
	if es[3].Name() != "anyOf.signatures[2]" {
		t.Errorf("name %q", es[3].Name())
	}

	keyOnly, err := verify.ParseConfig("k.yml", []byte("apiVersion: v1\nanyOf:\n  signatures:\n    - kind: pubKey\n      key: |\n        "+indentedKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if keyOnly.NeedsTrustRoot() || keyOnly.AnyOf.MinimumMatches != 1 {
		t.Errorf("pubKey-only config: NeedsTrustRoot %v, minimumMatches %d (want false, 1)", keyOnly.NeedsTrustRoot(), keyOnly.AnyOf.MinimumMatches)
	}

	for _, tc := range []struct{ name, yaml, want string }{
		{"not yaml", "allOf: [", "not YAML"},
		{"no apiVersion", "allOf: [{kind: githubAction, owner: a}]", "apiVersion: missing"},
		{"other apiVersion", "apiVersion: v2\nallOf: [{kind: githubAction, owner: a}]", `apiVersion: "v2" is not supported`},
		{"empty", "apiVersion: v1", "neither allOf nor anyOf"},
		{"unknown top field", "apiVersion: v1\noneOf: []", `unknown field "oneOf"`},
		{"unknown kind", "apiVersion: v1\nallOf: [{kind: gitlab, owner: a}]", `allOf[0] (line 2): kind: "gitlab" is not`},
		{"missing kind", "apiVersion: v1\nallOf: [{owner: a}]", "allOf[0] (line 2): kind: missing"},
		{"unknown entry field", "apiVersion: v1\nallOf: [{kind: githubAction, owner: a, repository: b}]", `allOf[0] (githubAction) (line 2): unknown field "repository"`},
		{"github no owner", "apiVersion: v1\nallOf: [{kind: githubAction, repo: b}]", "allOf[0] (githubAction): owner: missing"},
		{"bad key", "apiVersion: v1\nallOf: [{kind: pubKey, key: nope}]", "allOf[0] (pubKey): key: not a PEM public key"},
		{"no key", "apiVersion: v1\nallOf: [{kind: pubKey}]", "allOf[0] (pubKey): key: missing"},
		{"no issuer", "apiVersion: v1\nallOf: [{kind: genericIssuer, subject: {equal: a}}]", "allOf[0] (genericIssuer): issuer: missing"},
		{"no subject", "apiVersion: v1\nallOf: [{kind: genericIssuer, issuer: i}]", "allOf[0] (genericIssuer): subject: missing"},
		{"both subjects", "apiVersion: v1\nallOf: [{kind: genericIssuer, issuer: i, subject: {equal: a, urlPrefix: b}}]", "exactly one of equal and urlPrefix"},
		{"bad subject field", "apiVersion: v1\nallOf: [{kind: genericIssuer, issuer: i, subject: {regex: a}}]", `allOf[0].subject (line 2): unknown field "regex"`},
		{"anyOf without signatures", "apiVersion: v1\nanyOf: {minimumMatches: 1}", "anyOf.signatures: missing"},
		{"minimumMatches zero", "apiVersion: v1\nanyOf: {minimumMatches: 0, signatures: [{kind: githubAction, owner: a}]}", `anyOf.minimumMatches: "0"`},
		{"minimumMatches too many", "apiVersion: v1\nanyOf: {minimumMatches: 2, signatures: [{kind: githubAction, owner: a}]}", "can never be satisfied"},
		{"annotation not a string", "apiVersion: v1\nallOf: [{kind: githubAction, owner: a, annotations: {x: [1]}}]", "allOf[0].annotations.x (line 2): want a string value"},
		{"second entry named", "apiVersion: v1\nallOf: [{kind: githubAction, owner: a}, {kind: githubAction}]", "allOf[1] (githubAction): owner: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.ParseConfig("bad.yml", []byte(tc.yaml))
			if !errors.Is(err, verify.ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), "bad.yml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant the file name and %q", err, tc.want)
			}
		})
	}
}

func TestScaffoldParses(t *testing.T) {
	c, err := verify.ParseConfig("scaffold", []byte(verify.Scaffold))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.AllOf) != 1 || c.AllOf[0].Kind != verify.KindGithubAction || c.AllOf[0].Owner != "kubewarden" || c.AnyOf != nil {
		t.Fatalf("scaffold: %+v", c)
	}
}

func TestConfigFromFlags(t *testing.T) {
	kp := filepath.Join(t.TempDir(), "k.pub")
	if err := os.WriteFile(kp, []byte(testKey(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := verify.ConfigFromFlags(verify.Flags{Keys: []string{kp}, Annotations: map[string]string{"env": "prod"},
		CertEmail: "a@b.c", CertIssuer: "https://i", GitHubOwner: "acme", GitHubRepo: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.AllOf) != 3 || c.AnyOf != nil {
		t.Fatalf("want three allOf entries, got %+v", c)
	}
	for _, e := range c.AllOf {
		if e.Annotations["env"] != "prod" {
			t.Errorf("%s: annotations %v", e.Name(), e.Annotations)
		}
	}
	for _, tc := range []struct {
		f    verify.Flags
		want string
	}{
		{verify.Flags{CertEmail: "a@b"}, "--cert-email and --cert-oidc-issuer go together"},
		{verify.Flags{GitHubRepo: "r"}, "--github-repo needs --github-owner"},
		{verify.Flags{Annotations: map[string]string{"a": "b"}}, "--verification-annotation needs a signer"},
		{verify.Flags{}, "no signer given"},
		{verify.Flags{Keys: []string{filepath.Join(t.TempDir(), "missing.pub")}}, "--verification-key"},
	} {
		if _, err := verify.ConfigFromFlags(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.f, err, tc.want)
		}
	}
}

// TestTrustRootFailsClosed: a trust root that cannot be fetched (a TUF
// mirror that does not answer) or read is ErrTrustRoot, never a root that
// trusts nothing or anything.
func TestTrustRootFailsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	start := time.Now()
	if _, err := verify.FetchTUF("http://"+addr, t.TempDir()); !errors.Is(err, verify.ErrTrustRoot) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("FetchTUF from a closed port: %v, want ErrTrustRoot naming %s", err, addr)
	}
	t.Logf("failed after %v", time.Since(start))
	// A ClientTrustConfig (cosign trusted-root create + signing config) is
	// read for its trustedRoot.
	tr, err := os.ReadFile(verifytest.NewSigstore(t).TrustRootPath)
	if err != nil {
		t.Fatal(err)
	}
	ctc := `{"mediaType":"application/vnd.dev.sigstore.clienttrustconfig.v0.1+json","trustedRoot":` + string(tr) + `,"signingConfig":{}}`
	if got, err := verify.ParseTrustRoot("ctc.json", []byte(ctc)); err != nil || len(got.FulcioCertificateAuthorities()) != 2 || len(got.RekorLogs()) != 1 {
		t.Fatalf("ClientTrustConfig: %v", err)
	}
	for _, tc := range []struct{ name, json, want string }{
		{"not json", "nope", "not JSON"},
		{"empty", "{}", "not a Sigstore trusted root"},
		{"client trust config without root", `{"mediaType":"application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"}`, "without trustedRoot"},
	} {
		if _, err := verify.ParseTrustRoot(tc.name, []byte(tc.json)); !errors.Is(err, verify.ErrTrustRoot) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrTrustRoot with %q", tc.name, err, tc.want)
		}
	}
}
