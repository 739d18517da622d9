// Package capabilities answers the host calls a policy makes: Kubewarden's
// host capabilities (kubernetes get/list/can_i, oci manifests, net DNS
// lookups, crypto certificate checks), each reachable only by the policies
// allowed to use it, with the request and answer wire formats and the error
// texts of Kubewarden's policy-server, so that Kubewarden's context-aware
// policies behave the same here.
//
// It owns: decoding host-call payloads, the allow-lists
// (contextAwareResources, hostCapabilities patterns), the Kubernetes client
// and its bounded caches (informers started lazily per declared kind,
// a TTL cache for can_i), the capability metrics (tollgate_capability_*),
// the spans of host calls made under a traced request (through the
// OpenTelemetry API alone: the caller's span carries the tracer), and
// kwctl's record/replay session format.
//
// It must NOT know about: HTTP serving, Wasm or waPC instances, policies.yml
// or the CLI. The single entry point is [New], whose [Host.ForPolicy] returns
// the function a loaded policy calls for each host call (policy.Spec.HostCalls
// takes it as it is). Logging (tracing/log) is answered by host/policy and
// never reaches this package.
package capabilities
