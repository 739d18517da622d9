// Package serve assembles and runs the policy server of `tollgate serve`:
// the configuration (with its wait for an empty policies.yml), the Wasm host,
// the module resolver (sources.yml, the registry client, signature
// verification), TLS (a given or generated certificate, reloaded), the host
// capabilities, the OpenTelemetry export (host/telemetry), the ConfigMap
// watch, and host/server's life cycle: probes,
// loads, start, reloads on SIGHUP, drain on SIGTERM. [Run] is its one entry
// point.
//
// It owns the wiring between the host packages, nothing they do themselves.
// It must NOT know about: flags, the environment or the --config file
// (cmd/tollgate merges them into [Options]), output formats (it writes only
// the generated certificate's notice and its log), how a policy runs
// (host/policy), how requests are served (host/server), or how files are
// parsed (host/config).
package serve
