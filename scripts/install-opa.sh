#!/usr/bin/env bash
# install-opa.sh builds the OPA command line (`opa build -t wasm` compiles the Rego example
# policies) from the Go module proxy, at the version Kubewarden's policies CI pins.
#
# Idempotent: a second run checks and returns at once without network access. opa is built into a
# cache keyed by version OUTSIDE the repository, so every clone on the machine shares it:
#   ${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}/opa-$OPA_VERSION/bin/opa
# The last line printed is the path of the opa binary.
#
# Environment:
#   TOLLGATE_TOOLS_DIR  where tools are cached (see above)
#   OPA_VERSION         default 0.65.0 (Kubewarden's policies CI)
#   GO                  the go command (default: go)
set -euo pipefail

OPA_VERSION="${OPA_VERSION:-0.65.0}"
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
GO="${GO:-go}"
OPA_ROOT="$TOOLS_DIR/opa-$OPA_VERSION"
OPA_BIN="$OPA_ROOT/bin/opa"

log() { printf 'install-opa: %s\n' "$*" >&2; }
die() { printf 'install-opa: error: %s\n' "$*" >&2; exit 1; }

# build_opa builds opa into a temporary directory next to OPA_ROOT and renames it into place, so
# an interrupted run never leaves a half-built tool behind.
build_opa() {
	command -v "$GO" >/dev/null || die "go not found (set GO=/path/to/go)"
	mkdir -p "$TOOLS_DIR"
	find "$TOOLS_DIR" -maxdepth 1 -name ".opa-*" -type d -mmin +60 -exec rm -rf {} + 2>/dev/null || true
	local tmp
	tmp="$(mktemp -d "$TOOLS_DIR/.opa-$OPA_VERSION.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "chmod -R u+w '$tmp' 2>/dev/null; rm -rf '$tmp'" EXIT
	log "building opa v$OPA_VERSION into $OPA_ROOT (takes a minute or two)"
	local start=$SECONDS
	# A wrapper module that requires opa, as for TinyGo: `go install pkg@version` reads the
	# module's version list, which the proxy may refuse.
	local wrap="$tmp/wrapper"
	mkdir -p "$wrap"
	cat >"$wrap/go.mod" <<EOM
module tollgate.local/opa-wrapper

go 1.22

require github.com/open-policy-agent/opa v$OPA_VERSION
EOM
	cat >"$wrap/tools.go" <<'EOM'
//go:build tools

package tools

import _ "github.com/open-policy-agent/opa"
EOM
	(
		cd "$wrap"
		GOFLAGS=-mod=mod "$GO" mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod "$GO" mod download all
		GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" build -trimpath -ldflags=-s -o "$tmp/root/bin/opa" \
			github.com/open-policy-agent/opa
	) || die "building opa v$OPA_VERSION failed"
	"$tmp/root/bin/opa" version >/dev/null || die "the opa just built does not run"
	rm -rf "$OPA_ROOT"
	if ! mv -T "$tmp/root" "$OPA_ROOT" 2>/dev/null; then
		"$OPA_BIN" version >/dev/null 2>&1 || die "cannot move opa into $OPA_ROOT"
	fi
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
	trap - EXIT
	log "opa v$OPA_VERSION built in $((SECONDS - start)) s"
}

main() {
	if [[ ! -x "$OPA_BIN" ]] || ! "$OPA_BIN" version >/dev/null 2>&1; then
		build_opa
	fi
	printf '%s\n' "$OPA_BIN"
}

main "$@"
