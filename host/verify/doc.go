// Package verify decides whether a policy module in an OCI registry was
// signed as a Kubewarden verification config requires, with Sigstore's Go
// libraries: cosign's packages for cosign's legacy signatures (a
// sha256-<hex>.sig tag: key-based, or keyless with a Fulcio certificate and
// the Rekor bundle in the layer annotations) and sigstore-go for Sigstore
// bundles (v0.3, DSSE, attached as OCI referrers).
//
// It owns: the verification config format (Kubewarden's apiVersion v1:
// allOf, anyOf/minimumMatches, pubKey / genericIssuer / githubAction,
// annotations), loading the Sigstore trust root (trusted_root.json or a
// ClientTrustConfig), reading a module's signatures from its repository,
// matching certificate identities, and the cache of verified digests.
// [Verifier.Verify] is the one entry point; [Fetcher] pins the verified
// digest so that the module that runs is the one that was verified; [Files]
// makes Verifiers from files that may change, and polls them.
//
// It must NOT know about: Wasm, policies.yml, the policy server, Kubernetes,
// or the command line. The registry protocol is host/oci's (the same
// transport, credentials and sources.yml as the module pull); signing is
// never done here.
package verify
