package verify_test

import (
	"context"
	"testing"

	"github.com/tollgate-dev/tollgate/host/verify"
	"github.com/tollgate-dev/tollgate/host/verify/verifytest"
)

// BenchmarkVerify measures verification against the real local registry
// (docker-registry 2.8, plain HTTP on 127.0.0.1):
//   - cached: a digest verified before (what a policy load pays again);
//   - fetch-cached/fetch-plain: the whole registry:// fetch of a pinned,
//     stored module with and without verification (its added cost);
//   - cold-keyless-sig, cold-bundle, cold-key: a new Verifier each time
//     (empty cache): read the signatures and verify them.
func BenchmarkVerify(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	id := verifytest.Identity{Email: email, Issuer: issuer}
	keylessURI, keylessD := e.push(b, "bench/keyless", "v1")
	e.ss.SignKeyless(b, keylessD, id, verifytest.KeylessOptions{})
	bundleURI, bundleD := e.push(b, "bench/bundle", "v1")
	e.ss.AttachBundle(b, bundleD, email, issuer, "")
	keyURI, keyD := e.push(b, "bench/key", "v1")
	k := verifytest.NewKey(b)
	k.SignKey(b, keyD, nil)

	keyless := genericIssuer("{equal: " + email + "}")
	pinned := keylessURI + "@" + keylessD.DigestStr()

	b.Run("cached", func(b *testing.B) {
		v := e.verifier(b, keyless)
		mustVerify(b, v, pinned, keylessD)
		b.ResetTimer()
		for b.Loop() {
			if _, err := v.Verify(ctx, pinned); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fetch-plain", func(b *testing.B) {
		if _, _, err := e.client.Fetch(ctx, pinned); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, _, err := e.client.Fetch(ctx, pinned); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fetch-cached", func(b *testing.B) {
		f := &verify.Fetcher{Verifier: e.verifier(b, keyless), Inner: e.client}
		if _, _, err := f.Fetch(ctx, pinned); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, _, err := f.Fetch(ctx, pinned); err != nil {
				b.Fatal(err)
			}
		}
	})
	cold := func(name, cfg, uri string) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := e.verifier(b, cfg).Verify(ctx, uri); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	cold("cold-keyless-sig", keyless, pinned)
	cold("cold-bundle", keyless, bundleURI+"@"+bundleD.DigestStr())
	cold("cold-key", pubKeyConfig(k, ""), keyURI+"@"+keyD.DigestStr())
	cold("cold-keyless-sig-tag", keyless, keylessURI)
}
