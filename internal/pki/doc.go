// Package pki is tollgate's one certificate factory: ECDSA P-256 keys, self-signed CAs, leaf
// certificates for servers and clients signed by them, and the PEM encoding and parsing of
// certificates and keys.
//
// It owns what a certificate says (subject, SANs, key usages, validity, serial, key
// identifiers) and how it is encoded. It does not know Kubernetes objects, when a certificate
// should be renewed or replaced (rotation policy belongs to its caller, e.g. the operator's
// CertManager), nor where certificates are kept (files, Secrets): callers write the PEM it
// returns.
//
// Every CA it makes may sign leaves only (path length zero) with key usages cert-sign,
// CRL-sign and digital-signature; every leaf has digital-signature and one extended usage
// (server or client authentication), and expires no later than its CA.
package pki
