#!/usr/bin/env bash
# install-binaryen.sh installs wasm-opt from binaryen $BINARYEN_VERSION (default 116.0.0, the version
# Kubewarden's policy CI pins) from the npm package binaryen@$BINARYEN_VERSION: binaryen compiled to
# WebAssembly and run by Node.js. scripts/build-policies.sh runs it on the policies that Kubewarden
# would optimize (`wasm-opt --all-features -Oz`, see docs/building-policies.md).
#
# Debian 12's binaryen is 108: its --all-features output uses a pre-standard GC encoding that no
# engine reads. It stays installed (scripts/install-tools.sh) for TinyGo alone, which runs whatever
# `wasm-opt` is on PATH on every build; this one is NOT put on PATH, so TinyGo's output does not change.
#
# Idempotent: a second run checks the installed version and returns without network access. The
# package goes into a cache keyed by version OUTSIDE the repository, shared by every clone:
#   ${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}/binaryen-$BINARYEN_VERSION/
# The last line printed is the path of the wasm-opt command.
#
# Environment:
#   TOLLGATE_TOOLS_DIR  where tools are cached (see above)
#   BINARYEN_VERSION    default 116.0.0
#   SKIP_APT=1          do not install Node.js and npm from apt when they are missing
set -euo pipefail

BINARYEN_VERSION="${BINARYEN_VERSION:-116.0.0}"
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
ROOT_DIR="$TOOLS_DIR/binaryen-$BINARYEN_VERSION"
WASM_OPT="$ROOT_DIR/bin/wasm-opt"
MAJOR="${BINARYEN_VERSION%%.*}"

log() { printf 'install-binaryen: %s\n' "$*" >&2; }
die() { printf 'install-binaryen: error: %s\n' "$*" >&2; exit 1; }

# installed reports whether WASM_OPT runs and is the pinned version.
installed() {
	[[ -x "$WASM_OPT" ]] && [[ "$("$WASM_OPT" --version 2>/dev/null)" == "wasm-opt version $MAJOR "* ]]
}

# need_node installs Debian's nodejs and npm when npm is missing (a machine with Node.js from
# elsewhere keeps it).
need_node() {
	command -v node >/dev/null && command -v npm >/dev/null && return 0
	[[ "${SKIP_APT:-}" != 1 ]] || die "node and npm are needed to install binaryen@$BINARYEN_VERSION (SKIP_APT=1 is set)"
	command -v apt-get >/dev/null || die "node and npm are missing and there is no apt-get to install them"
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null || die "node and npm are missing: run as root or install sudo"
		sudo=(sudo)
	fi
	log "installing apt packages: nodejs npm"
	"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 -q update >&2 &&
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 -q install -y \
			--no-install-recommends nodejs npm >&2 || die "apt-get install nodejs npm failed"
}

install() {
	need_node
	mkdir -p "$TOOLS_DIR"
	# Leftovers of killed runs (an hour is far longer than an install).
	find "$TOOLS_DIR" -maxdepth 1 -name ".binaryen-*" -type d -mmin +60 -exec rm -rf {} + 2>/dev/null || true
	local tmp
	tmp="$(mktemp -d "$TOOLS_DIR/.binaryen-$BINARYEN_VERSION.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" EXIT
	log "installing binaryen@$BINARYEN_VERSION from npm into $ROOT_DIR"
	printf '{"private":true}\n' >"$tmp/package.json"
	(cd "$tmp" && npm install --no-audit --no-fund --ignore-scripts --save-exact "binaryen@$BINARYEN_VERSION") >&2 ||
		die "npm install binaryen@$BINARYEN_VERSION failed"
	chmod 755 "$tmp"
	mkdir -p "$tmp/bin"
	ln -s ../node_modules/binaryen/bin/wasm-opt "$tmp/bin/wasm-opt"
	local v
	v="$("$tmp/bin/wasm-opt" --version)" || die "the wasm-opt just installed does not run"
	[[ "$v" == "wasm-opt version $MAJOR "* ]] || die "binaryen@$BINARYEN_VERSION reports \"$v\", want version $MAJOR"
	rm -rf "$ROOT_DIR"
	if ! mv -T "$tmp" "$ROOT_DIR" 2>/dev/null; then
		installed || die "cannot move binaryen into $ROOT_DIR"
	fi
	trap - EXIT
	rm -rf "$tmp"
}

installed || install
printf '%s\n' "$WASM_OPT"
