// Package verifytest signs modules in a test registry the way cosign and
// Sigstore do, with Sigstore's own code and no network: cosign's key
// generation and signature packages (payload, static signatures, attaching
// and writing the sha256-<hex>.sig manifest), sigstore-go's virtual Sigstore
// (a Fulcio CA, a Rekor log key that signs SETs and checkpoints) and its
// trusted root, rekor's entry types for the logged body. Nothing here
// imitates a format by hand: it wires those libraries together.
//
// It knows nothing of tollgate's verifier; tests of host/verify and of the
// CLI use it alike.
package verifytest
