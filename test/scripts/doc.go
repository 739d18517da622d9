// Package scripts tests the repository's shell scripts (scripts/build-policies.sh) by running
// them on throw-away repository trees: what they build, skip, annotate and how they fail. It uses
// the go-wasip1 build kind, which needs only Go, so the tests do not wait for TinyGo; the TinyGo
// kinds are exercised by `make policies` on the real policies.
//
// It knows the scripts' command lines and messages, not how tollgate evaluates a module.
package scripts
