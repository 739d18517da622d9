// Package server is tollgate's admission webhook: HTTPS routes
// (/validate/{id}, /validate_raw/{id}, /audit/{id}), the plain-HTTP probe
// port (/readiness, /livez, /metrics, /policies; open while the first policy
// set loads: Open, ServeProbes, Load, Start), TLS with certificate
// reload, bounded concurrency with a bounded queue shared fairly between
// policies (limiter.go: a per-policy share of workers and queue, served in
// turn, and a cool-down for a policy that ran out of time or memory), body limits and a budget of body bytes in flight (bodies.go), a
// connection cap, timeouts, graceful drain, hot reload of the policy set
// with an atomic swap, and shadow evaluation (shadow.go: a policy's
// candidate version evaluated after the serving answer, on workers of its
// own, and compared with it).
//
// With Options.Tracer it traces each webhook request (trace.go): a server
// span continuing the caller's W3C trace context, a span per policy
// evaluation and group member; it knows the OpenTelemetry API only, not how
// spans are exported (host/telemetry).
//
// It owns Kubewarden's admission semantics on top of a policy's raw
// verdict: monitor mode, allowedToMutate, no mutation of DELETE, message
// override with the original in status.details.causes, policy groups, and
// the always-accept namespace.
//
// It must NOT know how a policy runs (Wasm, waPC, instance pools: that is
// host/policy behind the Loader interface), how modules are fetched
// (host/module), or how configuration files are parsed (host/config).
package server
