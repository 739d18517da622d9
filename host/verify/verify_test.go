package verify_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
)

// env is a real registry (Debian's docker-registry, no referrers API), a
// client for it, and a virtual Sigstore.
type env struct {
	reg    *ocitest.Registry
	client *oci.Client
	ss     *verifytest.Sigstore
	n      int
}

func newEnv(t testing.TB) *env {
	t.Helper()
	reg := ocitest.Start(t, ocitest.Options{})
	c, err := oci.NewClient(oci.Options{StorePath: t.TempDir(), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
	if err != nil {
		t.Fatal(err)
	}
	return &env{reg: reg, client: c, ss: verifytest.NewSigstore(t)}
}

// push pushes a distinct module to repo:tag and returns its URI (the tag)
// and its digest as go-containerregistry names it.
func (e *env) push(t testing.TB, repo, tag string) (string, name.Digest) {
	t.Helper()
	uri := e.reg.URI(repo) + ":" + tag
	e.n++
	title := fmt.Sprintf("%s %s %s %d", repo, tag, t.Name(), e.n)
	d, err := e.client.Push(context.Background(), ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": title}, 0), uri, oci.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return uri, verifytest.Digest(t, e.reg.Host, repo, d)
}

func (e *env) verifier(t testing.TB, cfg string) *verify.Verifier {
	t.Helper()
	c, err := verify.ParseConfig("test.yml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	// The trust root as users give it: the trusted_root.json file.
	tr, err := verify.LoadTrustRoot(e.ss.TrustRootPath)
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(c, verify.Options{Registry: e.client, TrustRoot: tr})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// keySigned pushes repo:v1, signs it with a new key, and returns a
// verifier that requires that key.
func (e *env) keySigned(t testing.TB, repo string) (string, name.Digest, *verify.Verifier) {
	t.Helper()
	uri, d := e.push(t, repo, "v1")
	k := verifytest.NewKey(t)
	k.SignKey(t, d, nil)
	return uri, d, e.verifier(t, pubKeyConfig(k, ""))
}

func pubKeyConfig(k *verifytest.Key, annotations string) string {
	indented := strings.ReplaceAll(strings.TrimSpace(string(k.PublicPEM)), "\n", "\n      ")
	s := "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n      " + indented + "\n"
	if annotations != "" {
		s += "    annotations: " + annotations + "\n"
	}
	return s
}

const (
	issuer    = "https://id.example.com"
	email     = "release@example.com"
	ghWorkflw = "https://github.com/acme/policies/.github/workflows/release.yml@refs/tags/v1"
)

func genericIssuer(subject string) string {
	return "apiVersion: v1\nallOf:\n  - kind: genericIssuer\n    issuer: " + issuer + "\n    subject: " + subject + "\n"
}

func mustVerify(t testing.TB, v *verify.Verifier, uri string, d name.Digest) verify.Result {
	t.Helper()
	r, err := v.Verify(context.Background(), uri)
	if err != nil {
		t.Fatalf("Verify(%s): %v", uri, err)
	}
	if r.Digest != d.DigestStr() {
		t.Fatalf("verified digest %s, pushed %s", r.Digest, d.DigestStr())
	}
	if !strings.HasSuffix(r.URI, "@"+d.DigestStr()) {
		t.Fatalf("result URI %s is not pinned to %s", r.URI, d.DigestStr())
	}
	return r
}

func mustFail(t *testing.T, v *verify.Verifier, uri string, sentinel error, want ...string) error {
	t.Helper()
	_, err := v.Verify(context.Background(), uri)
	if err == nil {
		t.Fatalf("Verify(%s) succeeded, want %v", uri, sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("Verify(%s): %v\nwant an error wrapping %v", uri, err, sentinel)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Verify(%s) error lacks %q:\n%v", uri, w, err)
		}
	}
	return err
}

func TestKeyBasedSig(t *testing.T) {
	e := newEnv(t)
	uri, d := e.push(t, "policies/keyed", "v1")
	k := verifytest.NewKey(t)
	k.SignKey(t, d, map[string]any{"stage": "prod", "build": 7})

	r := mustVerify(t, e.verifier(t, pubKeyConfig(k, "{stage: prod, build: 7}")), uri, d)
	if len(r.Satisfied) != 1 || !strings.Contains(r.Satisfied[0], "sha256-") {
		t.Errorf("Satisfied = %q, want the .sig layer", r.Satisfied)
	}

	t.Run("wrong key", func(t *testing.T) {
		mustFail(t, e.verifier(t, pubKeyConfig(verifytest.NewKey(t), "")), uri, verify.ErrNotSatisfied,
			"allOf[0] pubKey", "not signed with this key", ".sig layer 0")
	})
	t.Run("annotation missing", func(t *testing.T) {
		mustFail(t, e.verifier(t, pubKeyConfig(k, "{team: infra}")), uri, verify.ErrNotSatisfied,
			`annotation "team" missing from the signature`)
	})
	t.Run("annotation mismatched", func(t *testing.T) {
		mustFail(t, e.verifier(t, pubKeyConfig(k, "{stage: dev}")), uri, verify.ErrNotSatisfied,
			`annotation "stage" is "prod", want "dev"`)
	})
	t.Run("keyless entry does not accept a key signature", func(t *testing.T) {
		mustFail(t, e.verifier(t, genericIssuer("{equal: "+email+"}")), uri, verify.ErrNotSatisfied,
			"signed with a key, not a certificate")
	})
}

func TestKeylessSig(t *testing.T) {
	e := newEnv(t)
	uri, d := e.push(t, "policies/keyless", "v1")
	e.ss.SignKeyless(t, d, verifytest.Identity{Email: email, Issuer: issuer}, verifytest.KeylessOptions{})
	mustVerify(t, e.verifier(t, genericIssuer("{equal: "+email+"}")), uri, d)

	t.Run("issuer mismatch", func(t *testing.T) {
		cfg := strings.Replace(genericIssuer("{equal: "+email+"}"), issuer, "https://other.example.com", 1)
		mustFail(t, e.verifier(t, cfg), uri, verify.ErrNotSatisfied,
			`issuer is "https://id.example.com", want "https://other.example.com"`)
	})
	t.Run("subject mismatch", func(t *testing.T) {
		mustFail(t, e.verifier(t, genericIssuer("{equal: someone@example.com}")), uri, verify.ErrNotSatisfied,
			`subject is "release@example.com", want "someone@example.com"`)
	})
	t.Run("urlPrefix mismatch", func(t *testing.T) {
		mustFail(t, e.verifier(t, genericIssuer("{urlPrefix: https://ci.example.com/acme}")), uri, verify.ErrNotSatisfied,
			`does not start with "https://ci.example.com/acme/"`)
	})
	t.Run("no trust root", func(t *testing.T) {
		c, err := verify.ParseConfig("t.yml", []byte(genericIssuer("{equal: "+email+"}")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify.New(c, verify.Options{Registry: e.client}); !errors.Is(err, verify.ErrTrustRoot) {
			t.Fatalf("New without a trust root: %v, want ErrTrustRoot", err)
		}
	})
}

func TestKeylessSigRejected(t *testing.T) {
	e := newEnv(t)
	cfg := genericIssuer("{equal: " + email + "}")
	id := verifytest.Identity{Email: email, Issuer: issuer}
	for _, tc := range []struct {
		name string
		opts verifytest.KeylessOptions
		want string
	}{
		{"untrusted CA", verifytest.KeylessOptions{Untrusted: true}, "does not chain to a trusted Fulcio CA"},
		{"expired at integration", verifytest.KeylessOptions{IntegratedTime: time.Now().Add(30 * time.Minute)}, "certificate expired before observed time"},
		{"no Rekor bundle", verifytest.KeylessOptions{NoBundle: true}, "offline verification failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, d := e.push(t, "policies/rejected", strings.ReplaceAll(tc.name, " ", "-"))
			e.ss.SignKeyless(t, d, id, tc.opts)
			mustFail(t, e.verifier(t, cfg), uri, verify.ErrNotSatisfied, tc.want)
		})
	}
}

func TestGithubAction(t *testing.T) {
	e := newEnv(t)
	uri, d := e.push(t, "policies/gh", "v1")
	e.ss.SignKeyless(t, d, verifytest.Identity{URI: ghWorkflw, Issuer: verify.GitHubIssuer, Repository: "acme/policies"}, verifytest.KeylessOptions{})
	mustVerify(t, e.verifier(t, "apiVersion: v1\nallOf: [{kind: githubAction, owner: acme, repo: policies}]\n"), uri, d)
	mustVerify(t, e.verifier(t, "apiVersion: v1\nallOf: [{kind: githubAction, owner: acme}]\n"), uri, d)
	mustFail(t, e.verifier(t, "apiVersion: v1\nallOf: [{kind: githubAction, owner: evil}]\n"), uri, verify.ErrNotSatisfied,
		`repository "acme/policies" is not owned by "evil"`)
	mustFail(t, e.verifier(t, "apiVersion: v1\nallOf: [{kind: githubAction, owner: acme, repo: other}]\n"), uri, verify.ErrNotSatisfied,
		`repository is "acme/policies", want "acme/other"`)

	// Not GitHub's issuer: an email identity from another issuer.
	uri2, d2 := e.push(t, "policies/gh", "v2")
	e.ss.SignKeyless(t, d2, verifytest.Identity{Email: email, Issuer: issuer, Repository: "acme/policies"}, verifytest.KeylessOptions{})
	mustFail(t, e.verifier(t, "apiVersion: v1\nallOf: [{kind: githubAction, owner: acme}]\n"), uri2, verify.ErrNotSatisfied,
		"not GitHub Actions'")
}

func TestBundleReferrer(t *testing.T) {
	e := newEnv(t)
	uri, d := e.push(t, "policies/bundled", "v1")
	e.ss.AttachBundle(t, d, email, issuer, "")
	// The registry has no referrers API and no .sig tag: both 404s are
	// "no signature of that kind", and the referrers tag index is read.
	r := mustVerify(t, e.verifier(t, genericIssuer("{equal: "+email+"}")), uri, d)
	if len(r.Satisfied) != 1 || !strings.Contains(r.Satisfied[0], "bundle sha256:") {
		t.Errorf("Satisfied = %q, want the bundle", r.Satisfied)
	}
	mustFail(t, e.verifier(t, genericIssuer("{equal: other@example.com}")), uri, verify.ErrNotSatisfied,
		`bundle sha256:`, `subject is "release@example.com", want "other@example.com"`)
	// As Kubewarden: bundles carry no annotations.
	cfg := genericIssuer("{equal: "+email+"}") + "    annotations: {stage: prod}\n"
	mustFail(t, e.verifier(t, cfg), uri, verify.ErrNotSatisfied, "carries no annotations")

	t.Run("bundle signed with a key", func(t *testing.T) {
		uri3, d3 := e.push(t, "policies/bundled", "v3")
		verifytest.AttachKeyBundle(t, d3)
		mustFail(t, e.verifier(t, genericIssuer("{equal: "+email+"}")), uri3, verify.ErrNotSatisfied, "bundle is signed with a key, not a certificate")
		mustFail(t, e.verifier(t, pubKeyConfig(verifytest.NewKey(t), "")), uri3, verify.ErrNotSatisfied, "pubKey entries match only .sig signatures")
	})
	t.Run("bundle for another digest", func(t *testing.T) {
		uri2, d2 := e.push(t, "policies/bundled", "v2")
		e.ss.AttachBundle(t, d2, email, issuer, d.DigestStr())
		mustFail(t, e.verifier(t, genericIssuer("{equal: "+email+"}")), uri2, verify.ErrNotSatisfied, "bundle sha256:", "digest")
	})
}

func TestUnsignedTamperedAndMisattached(t *testing.T) {
	e := newEnv(t)
	k := verifytest.NewKey(t)
	v := e.verifier(t, pubKeyConfig(k, ""))

	uri, d := e.push(t, "policies/unsigned", "v1")
	mustFail(t, v, uri, verify.ErrUnsigned, d.DigestStr(), "no tag sha256-"+strings.TrimPrefix(d.DigestStr(), "sha256:")+".sig")

	// Signed, then the tag moved to other bytes: the new digest is unsigned.
	uri2, d2 := e.push(t, "policies/tampered", "v1")
	k.SignKey(t, d2, nil)
	mustVerify(t, v, uri2, d2)
	_, d3 := e.push(t, "policies/tampered", "v1") // same tag, other module
	if d3.DigestStr() == d2.DigestStr() {
		t.Fatal("the second push has the same digest")
	}
	mustFail(t, v, uri2, verify.ErrUnsigned, d3.DigestStr())
	// The signed digest still verifies when pinned.
	mustVerify(t, v, uri2+"@"+d2.DigestStr(), d2)

	// A signature made for another manifest, attached to this one.
	uri4, d4 := e.push(t, "policies/misattached", "v1")
	k.SignKeyClaiming(t, d4, d2, nil)
	mustFail(t, v, uri4, verify.ErrNotSatisfied, "the signature is for another manifest", d2.DigestStr())
}

func TestAllOfAnyOf(t *testing.T) {
	e := newEnv(t)
	uri, d := e.push(t, "policies/multi", "v1")
	k1, k2, k3 := verifytest.NewKey(t), verifytest.NewKey(t), verifytest.NewKey(t)
	k1.SignKey(t, d, nil)
	k2.SignKey(t, d, nil)
	e.ss.SignKeyless(t, d, verifytest.Identity{Email: email, Issuer: issuer}, verifytest.KeylessOptions{})
	entry := func(k *verifytest.Key) string {
		return "{kind: pubKey, key: " + fmt.Sprintf("%q", string(k.PublicPEM)) + "}"
	}
	cfg := func(min int, keys ...*verifytest.Key) string {
		var es []string
		for _, k := range keys {
			es = append(es, entry(k))
		}
		return fmt.Sprintf("apiVersion: v1\nallOf:\n  - {kind: genericIssuer, issuer: %s, subject: {equal: %s}}\nanyOf:\n  minimumMatches: %d\n  signatures: [%s]\n",
			issuer, email, min, strings.Join(es, ", "))
	}
	mustVerify(t, e.verifier(t, cfg(2, k1, k2, k3)), uri, d)
	err := mustFail(t, e.verifier(t, cfg(3, k1, k2, k3)), uri, verify.ErrNotSatisfied, "anyOf: 2 of minimumMatches 3 satisfied", "anyOf.signatures[2] pubKey")
	var ve *verify.Error
	if !errors.As(err, &ve) || len(ve.Failures) != 1 {
		t.Fatalf("want one failure (anyOf.signatures[2]), got %#v", ve)
	}
}

func TestCacheAndFetcher(t *testing.T) {
	e := newEnv(t)
	uri, d, v := e.keySigned(t, "policies/cached")
	f := &verify.Fetcher{Verifier: v, Inner: e.client}
	wasm, got, err := f.Fetch(context.Background(), uri)
	if err != nil || got != d.DigestStr() || len(wasm) == 0 {
		t.Fatalf("Fetch: %d bytes, %s, %v", len(wasm), got, err)
	}
	pinned := uri + "@" + d.DigestStr()
	r := mustVerify(t, v, pinned, d)
	if !r.Cached {
		t.Error("second verification of the digest was not cached")
	}
	// Cached and pinned: no registry needed, neither for the verification
	// nor for the module (in the store).
	e.reg.Stop()
	if _, _, err := f.Fetch(context.Background(), pinned); err != nil {
		t.Fatalf("Fetch of a verified, stored, pinned module with the registry down: %v", err)
	}
	// An unverified fetch never reaches the inner fetcher.
	_, _, err = (&verify.Fetcher{Verifier: v, Inner: e.client}).Fetch(context.Background(), "file:///tmp/x.wasm")
	if !errors.Is(err, verify.ErrNotRegistry) {
		t.Fatalf("file:// module: %v, want ErrNotRegistry", err)
	}
}

// TestRegistryErrors: a registry that cannot be read is ErrSignatures (not
// "unsigned"), and a module that does not exist is host/oci's not found.
func TestRegistryErrors(t *testing.T) {
	e := newEnv(t)
	uri, d, v := e.keySigned(t, "policies/down")
	if _, err := v.Verify(context.Background(), e.reg.URI("policies/absent:v1")); !errors.Is(err, oci.ErrNotFound) {
		t.Fatalf("absent module: %v, want oci.ErrNotFound", err)
	}
	e.reg.Stop()
	err := mustFail(t, v, uri+"@"+d.DigestStr(), verify.ErrSignatures, "registry unreachable")
	if errors.Is(err, verify.ErrUnsigned) || errors.Is(err, verify.ErrNotSatisfied) {
		t.Fatalf("an unreachable registry reads as a refusal: %v", err)
	}
}
