// Package ocitest runs a real OCI registry (Debian's docker-registry, the
// CNCF distribution registry) on 127.0.0.1 for tests, with or without TLS
// and htpasswd authentication, and builds small valid Wasm modules to push.
//
// It knows nothing of tollgate's OCI client: tests of host/oci, the CLI and
// the policy server use it alike. It installs nothing: when the registry
// binary is missing the test fails and says to run `make tools`.
package ocitest
