// Package config turns the policy server's inputs — a Kubewarden
// policies.yml, a sources.yml, and server options from flags, environment
// and an optional server config file — into a validated, immutable Config.
//
// It owns parsing and validation only. It has no side effects: it does not
// read module bytes, open sockets, resolve URIs or touch the compilation
// cache, and it knows nothing of Wasm, HTTP or admission semantics. Every
// error names the file, the policy id, the field and the value at fault;
// all problems of one file are reported together (errors.Join), not only the
// first.
package config
