#!/usr/bin/env bash
# install-tools.sh installs what building tollgate's policies and running its tests needs:
# Debian packages (LLVM 19, wasi-libc, ...), TinyGo built from the Go module proxy, and wasm-opt 116
# from npm (scripts/install-binaryen.sh).
#
# Idempotent: a second run checks and returns quickly without network access. TinyGo is built into
# a cache keyed by version OUTSIDE the repository, so every clone on the machine shares it:
#   ${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}/tinygo-$TINYGO_VERSION/
# The last line printed is the path of the tinygo binary.
#
# Usage: scripts/install-tools.sh [tinygo]
#   tinygo   install only what TinyGo builds need (its Debian packages and TinyGo itself), not the
#            test tools (registry, containerd, ...) nor binaryen 116: what scripts/build-policies.sh
#            runs when a TinyGo policy must be built and TinyGo is missing (make demo)
#
# Environment:
#   TOLLGATE_TOOLS_DIR  where tools are cached (see above)
#   TINYGO_VERSION      default 0.41.1 (the newest that builds from the proxy against LLVM 19)
#   GO                  the go command (default: go)
#   SKIP_APT=1          do not check/install apt packages (for machines where they are provided)
set -euo pipefail

TINYGO_VERSION="${TINYGO_VERSION:-0.41.1}"
# HOME may be unset in a stripped CI environment: fall back to the account's home directory.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
GO="${GO:-go}"
LLVM_MAJOR=19

log() { printf 'install-tools: %s\n' "$*" >&2; }
die() { printf 'install-tools: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Debian packages. OTHER HELPERS: add the apt packages your part needs to APT_PACKAGES below
# (one per line, with a comment saying who needs it). They are installed only when missing.
# ---------------------------------------------------------------------------------------------
TINYGO_APT_PACKAGES=(
	# TinyGo (LLVM 19 toolchain, wasm32 compiler-rt, wasi-libc, wasm-opt)
	"llvm-${LLVM_MAJOR}-dev"
	"clang-${LLVM_MAJOR}"
	"lld-${LLVM_MAJOR}"
	"libclang-${LLVM_MAJOR}-dev"
	"libclang-rt-${LLVM_MAJOR}-dev-wasm32"
	wasi-libc
	# wasm-opt 108, which TinyGo runs on every build (it takes the one on PATH). Kubewarden's
	# `wasm-opt --all-features -Oz` step uses binaryen 116 instead: scripts/install-binaryen.sh.
	binaryen
)
APT_PACKAGES=(
	"${TINYGO_APT_PACKAGES[@]}"
	# OCI tests (host/oci, cmd/tollgate push/pull): a real registry, CNCF distribution 2.8
	docker-registry
	# The real single-node cluster of test/e2e and `make demo-cluster` (test/e2e/cluster,
	# docs/e2e.md): the container runtime, its OCI runtime, the CNI bridge/host-local plugins,
	# iptables for kube-proxy and the kubelet, conntrack for kube-proxy, util-linux for nsenter.
	containerd
	runc
	containernetworking-plugins
	iptables
	conntrack
	util-linux
	# --- add further packages here ---
)

# install_apt_packages installs the packages named (default: APT_PACKAGES) that are missing.
install_apt_packages() {
	if [[ "${SKIP_APT:-}" == 1 ]]; then
		return 0
	fi
	local missing=() p
	local -a want=("$@")
	((${#want[@]} > 0)) || want=("${APT_PACKAGES[@]}")
	for p in "${want[@]}"; do
		# Like `dpkg -s`, but a package removed with its configuration left behind counts as missing.
		[[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null || die "missing packages ${missing[*]}: run as root or install sudo"
		sudo=(sudo)
	fi
	log "installing apt packages: ${missing[*]}"
	local start=$SECONDS
	local aptlog
	aptlog="$(mktemp)"
	# Other jobs on the machine may hold the dpkg lock: wait for it rather than fail.
	if ! { "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 -q update &&
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 -q install -y \
			--no-install-recommends "${missing[@]}"; } >"$aptlog" 2>&1; then
		cat "$aptlog" >&2
		rm -f "$aptlog"
		die "apt-get failed installing ${missing[*]} (output above)"
	fi
	rm -f "$aptlog"
	log "apt packages installed in $((SECONDS - start)) s"
}

# ---------------------------------------------------------------------------------------------
# TinyGo
# ---------------------------------------------------------------------------------------------
TINYGO_ROOT="$TOOLS_DIR/tinygo-$TINYGO_VERSION"
TINYGO_BIN="$TINYGO_ROOT/bin/tinygo"

# build_tinygo builds TinyGo into a temporary directory next to TINYGO_ROOT and renames it into
# place, so an interrupted run never leaves a half-built tool behind.
build_tinygo() {
	command -v "$GO" >/dev/null || die "go not found (set GO=/path/to/go)"
	mkdir -p "$TOOLS_DIR"
	# Leftovers of runs that were killed (SIGKILL skips the cleanup trap); an hour is far longer
	# than a build, so a concurrent run's directory is never removed.
	find "$TOOLS_DIR" -maxdepth 1 -name ".tinygo-*" -type d -mmin +60 -exec rm -rf {} + 2>/dev/null || true
	local tmp
	tmp="$(mktemp -d "$TOOLS_DIR/.tinygo-$TINYGO_VERSION.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" EXIT
	log "building TinyGo v$TINYGO_VERSION into $TINYGO_ROOT (takes about a minute)"
	local start=$SECONDS

	# `go install github.com/tinygo-org/tinygo@vX` fails (the proxy refuses the version list that
	# go install reads); a wrapper module that requires TinyGo builds it fine.
	local wrap="$tmp/wrapper"
	mkdir -p "$wrap"
	cat >"$wrap/go.mod" <<EOF
module tollgate.local/tinygo-wrapper

go 1.22

require github.com/tinygo-org/tinygo v$TINYGO_VERSION
EOF
	cat >"$wrap/tools.go" <<'EOF'
//go:build tools

package tools

import _ "github.com/tinygo-org/tinygo"
EOF
	(
		cd "$wrap"
		GOFLAGS=-mod=mod "$GO" mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod "$GO" mod download all
		GOFLAGS=-mod=mod CGO_ENABLED=1 "$GO" build -tags="llvm$LLVM_MAJOR" -o "$tmp/root/bin/tinygo" \
			github.com/tinygo-org/tinygo
	) || die "building TinyGo v$TINYGO_VERSION failed"

	# TinyGo finds its root at bin/..: it needs src/ and targets/ from the module (writable).
	local moddir
	moddir="$(cd "$wrap" && "$GO" list -m -f '{{.Dir}}' github.com/tinygo-org/tinygo)"
	[[ -d "$moddir/src" && -d "$moddir/targets" ]] || die "TinyGo module at $moddir has no src/ or targets/"
	cp -R "$moddir/src" "$moddir/targets" "$tmp/root/"
	chmod -R u+w "$tmp/root"
	# The net package is a git submodule, absent from the module zip; an empty directory lets
	# TinyGo start (code importing net/http will not build, which policies must avoid anyway).
	mkdir -p "$tmp/root/src/net"
	# Go's module cache is read-only; leave the wrapper's files deletable.
	chmod -R u+w "$tmp" 2>/dev/null || true

	"$tmp/root/bin/tinygo" version >/dev/null || die "the TinyGo just built does not run"
	rm -rf "$TINYGO_ROOT"
	if ! mv -T "$tmp/root" "$TINYGO_ROOT" 2>/dev/null; then
		# Another run (another clone) finished first; keep its result if it works.
		"$TINYGO_BIN" version >/dev/null 2>&1 || die "cannot move TinyGo into $TINYGO_ROOT"
	fi
	rm -rf "$tmp"
	trap - EXIT
	log "TinyGo v$TINYGO_VERSION built in $((SECONDS - start)) s"
}

# seed_tinygo_cache puts Debian's prebuilt compiler-rt and wasi-libc where TinyGo looks for the
# libraries it would otherwise build from git submodules the module zip lacks. `tinygo clean`
# deletes them, so this runs every time (a few cp, skipped when already identical).
seed_tinygo_cache() {
	local cache
	cache="$("$TINYGO_BIN" env GOCACHE)" || die "tinygo env GOCACHE failed"
	local rt="/usr/lib/llvm-$LLVM_MAJOR/lib/clang/$LLVM_MAJOR/lib/wasi/libclang_rt.builtins-wasm32.a"
	local libc="/usr/lib/wasm32-wasi/libc.a"
	local inc="/usr/include/wasm32-wasi"
	[[ -f "$rt" ]] || die "$rt missing (package libclang-rt-$LLVM_MAJOR-dev-wasm32)"
	[[ -f "$libc" && -d "$inc" ]] || die "$libc or $inc missing (package wasi-libc)"
	local d
	for d in compiler-rt-wasm32-unknown-wasi-generic wasi-libc-wasm32-unknown-wasi-generic; do
		mkdir -p "$cache/$d"
	done
	cmp -s "$rt" "$cache/compiler-rt-wasm32-unknown-wasi-generic/lib.a" ||
		cp "$rt" "$cache/compiler-rt-wasm32-unknown-wasi-generic/lib.a"
	cmp -s "$libc" "$cache/wasi-libc-wasm32-unknown-wasi-generic/lib.a" ||
		cp "$libc" "$cache/wasi-libc-wasm32-unknown-wasi-generic/lib.a"
	if [[ ! -d "$cache/wasi-libc-wasm32-unknown-wasi-generic/include" ]]; then
		cp -R "$inc" "$cache/wasi-libc-wasm32-unknown-wasi-generic/include.tmp.$$"
		mv "$cache/wasi-libc-wasm32-unknown-wasi-generic/include.tmp.$$" \
			"$cache/wasi-libc-wasm32-unknown-wasi-generic/include"
	fi
}

main() {
	case "${1:-}" in
	tinygo) install_apt_packages "${TINYGO_APT_PACKAGES[@]}" ;;
	"") install_apt_packages ;;
	*) die "unknown argument $1 (usage: scripts/install-tools.sh [tinygo])" ;;
	esac
	if [[ ! -x "$TINYGO_BIN" ]] || ! "$TINYGO_BIN" version >/dev/null 2>&1; then
		build_tinygo
	fi
	seed_tinygo_cache
	[[ "${1:-}" == tinygo ]] || "$(dirname "${BASH_SOURCE[0]}")/install-binaryen.sh" >/dev/null
	printf '%s\n' "$TINYGO_BIN"
}

main "$@"
