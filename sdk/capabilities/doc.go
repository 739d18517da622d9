// Package capabilities is the guest side of Kubewarden's host capabilities:
// typed helpers that build the host-call payloads a context-aware policy
// sends (kubernetes get_resource, list_resources_by_namespace,
// list_resources_all, can_i; oci v1/manifest_digest, v1/oci_manifest,
// v1/oci_manifest_config; net v1/dns_lookup_host; crypto
// v1/is_certificate_trusted) and decode the answers, with the wire formats
// of Kubewarden's policy-server (and tollgate's host/capabilities).
//
// The helpers are methods of [Host], whose Call field is the transport: the
// host-call function of whatever guest the policy is built with, all of
// which share one signature:
//
//	capabilities.Host{Call: guest.HostCall}  // standard Go, waPC (sdk/guest)
//	capabilities.Host{Call: wasi.HostCall}   // standard Go, WASI mode (sdk/wasi)
//	capabilities.Host{Call: wapc.HostCall}   // TinyGo, github.com/wapc/wapc-guest-tinygo
//
// The package uses only encoding/json, errors, fmt and strings, so it
// builds with TinyGo as well as with standard Go, natively too (where
// sdk/policytest answers the calls).
//
// It must NOT know about: the waPC or WASI ABI (the Call field carries the
// call), the policy's own request and settings, or how the host answers
// (caches, allow-lists, record and replay).
package capabilities
