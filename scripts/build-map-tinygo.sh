#!/usr/bin/env bash
# build-map-tinygo.sh builds a Go package with TinyGo against dependencies changed at build time:
# the patches of scripts/tinygo-patches (listed with their reasons in patches.txt and README.md)
# are applied to pristine copies of the modules from the Go module proxy, and to a copy of
# TinyGo's root, each cached once per version and patch outside the repository
# ($TOOLS_DIR/tinygo-patched/). The package's own go.mod is not touched: the build uses a temporary
# go.mod (GOFLAGS=-modfile) that replaces each patched module with its copy, and TINYGOROOT points
# TinyGo at the patched root. A module patch is applied only when the package depends on that
# module, and only at the version the patch was written for (any other version is an error).
#
# Usage:
#   scripts/build-map-tinygo.sh [--without NAME]... -o OUT PKGDIR [-- TINYGO-FLAGS...]
#       build PKGDIR into OUT (default flags: -target=wasip1 -scheduler=none -no-debug)
#   scripts/build-map-tinygo.sh --check
#       the probes of policies/mutating-admission-policy/internal/tinygoprobe: each must print
#       "ok" when built with every patch, and fail as patches.txt's reason says without the patch
#       it needs (the test that shows why each patch is there). Exit 0 only if all of that holds.
# Environment: TINYGO, TINYGO_VERSION, TOLLGATE_TOOLS_DIR, GO as in scripts/build-policies.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TINYGO_VERSION="${TINYGO_VERSION:-0.41.1}"
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
TINYGO="${TINYGO:-$TOOLS_DIR/tinygo-$TINYGO_VERSION/bin/tinygo}"
GO="${GO:-go}"
PATCHES="$ROOT/scripts/tinygo-patches"
CACHE="$TOOLS_DIR/tinygo-patched"

log() { printf 'build-map-tinygo: %s\n' "$*" >&2; }
die() { printf 'build-map-tinygo: error: %s\n' "$*" >&2; exit 1; }

# patch_lines prints patches.txt's entries (name target version file), without those named in WITHOUT.
patch_lines() {
	local name target version file
	while read -r name target version file; do
		[[ -z "$name" || "$name" == \#* ]] && continue
		[[ " ${WITHOUT[*]:-} " == *" $name "* ]] && continue
		[[ -f "$PATCHES/$file" ]] || die "scripts/tinygo-patches/patches.txt: $name: no file $file"
		printf '%s %s %s %s\n' "$name" "$target" "$version" "$file"
	done <"$PATCHES/patches.txt"
}

# patched_copy SRC KEY-PREFIX FILE... prints the directory of a copy of SRC with the patches FILE...
# applied (made once: the name holds the hash of the patches; an interrupted copy is never used).
patched_copy() {
	local src="$1" prefix="$2"
	shift 2
	local key dst tmp f
	key="$(cd "$PATCHES" && cat "$@" | sha256sum | cut -c1-12)"
	dst="$CACHE/$prefix-$key"
	if [[ ! -f "$dst/.complete" ]]; then
		mkdir -p "$CACHE"
		tmp="$(mktemp -d "$CACHE/.copy.XXXXXX")"
		cp -r "$src/." "$tmp/"
		chmod -R u+w "$tmp"
		for f in "$@"; do
			patch -d "$tmp" -p1 --batch --forward --no-backup-if-mismatch --quiet <"$PATCHES/$f" >&2 ||
				{ rm -rf "$tmp"; die "scripts/tinygo-patches/$f does not apply to $src"; }
		done
		touch "$tmp/.complete"
		mv -T "$tmp" "$dst" 2>/dev/null || rm -rf "$tmp" # another build made it first
	fi
	printf '%s\n' "$dst"
}

# tinygo_root prints the TinyGo root to build with: the pristine one when no patch targets it.
tinygo_root() {
	local pristine files=() name target version file
	pristine="$(cd "$(dirname "$TINYGO")/.." && pwd)"
	while read -r name target version file; do
		[[ "$target" == tinygo ]] || continue
		[[ "$version" == "$TINYGO_VERSION" ]] || die "patch $name is for TinyGo $version, not $TINYGO_VERSION"
		files+=("$file")
	done < <(patch_lines)
	if ((${#files[@]} == 0)); then
		printf '%s\n' "$pristine"
		return
	fi
	local dst
	dst="$(patched_copy "$pristine" "tinygo-$TINYGO_VERSION-root" "${files[@]}")"
	rm -rf "$dst/bin" # the binary stays where it is; TINYGOROOT says where the root is
	printf '%s\n' "$dst"
}

# modfile PKGDIR prints the path of a temporary go.mod for PKGDIR's module with the patched
# modules replaced; the caller removes its directory.
modfile() {
	local pkg="$1" moddir gomod mod name target version file have src dst esc
	gomod="$(cd "$pkg" && "$GO" env GOMOD)"
	[[ -n "$gomod" && "$gomod" != /dev/null ]] || die "$pkg is not inside a Go module"
	moddir="$(dirname "$gomod")"
	mod="$(mktemp -d)"
	cp "$gomod" "$mod/tinygo.mod"
	cp "$moddir/go.sum" "$mod/tinygo.sum" 2>/dev/null || : >"$mod/tinygo.sum"
	# the module's relative replace targets, made absolute for the go.mod in the temporary directory
	sed -i -E "s#=>[[:space:]]+(\.{1,2}/[^[:space:]]*)#=> $moddir/\1#" "$mod/tinygo.mod"
	# A module may have several patches: one copy with all of them (in patches.txt's order).
	local -A files=() versions=()
	local -a targets=()
	while read -r name target version file; do
		[[ "$target" == tinygo ]] && continue
		if [[ -z "${files[$target]:-}" ]]; then
			targets+=("$target")
			versions[$target]="$version"
		fi
		[[ "${versions[$target]}" == "$version" ]] || die "patches for $target name two versions: ${versions[$target]} and $version"
		files[$target]="${files[$target]:-} $file"
	done < <(patch_lines)
	for target in "${targets[@]}"; do
		version="${versions[$target]}"
		# -modfile: `go mod download` records checksums, in the temporary go.sum, not the module's
		have="$(cd "$pkg" && "$GO" list -modfile="$mod/tinygo.mod" -m -f '{{.Version}}' "$target" 2>/dev/null || true)"
		[[ -n "$have" ]] || continue # not a dependency of this package's module
		[[ "$have" == "$version" ]] || die "a patch is for $target $version, but $pkg's module uses $have: write the patch for $have"
		(cd "$pkg" && "$GO" mod download -modfile="$mod/tinygo.mod" "$target") >&2
		src="$(cd "$pkg" && "$GO" list -modfile="$mod/tinygo.mod" -m -f '{{.Dir}}' "$target")"
		[[ -d "$src" ]] || die "$target $version: not in the module cache"
		esc="$(printf '%s' "$target" | tr '/' '_')"
		# shellcheck disable=SC2086 # the list of patch files, split on purpose
		dst="$(patched_copy "$src" "$esc@$version" ${files[$target]})"
		printf '\nreplace %s => %s\n' "$target" "$dst" >>"$mod/tinygo.mod"
	done
	printf '%s\n' "$mod/tinygo.mod"
}

# build OUT PKGDIR [TINYGO-FLAGS...] builds with the patches (but WITHOUT's); it prints TinyGo's
# output on failure and returns non-zero.
build() {
	local out="$1" pkg="$2"
	shift 2
	local -a flags=("$@")
	((${#flags[@]} > 0)) || flags=(-target=wasip1 -scheduler=none -no-debug)
	# TinyGo stops interpreting package initializers after 3 minutes, which a loaded machine reaches
	flags+=(-interp-timeout=30m)
	[[ -x "$TINYGO" ]] || die "no TinyGo at $TINYGO: run make tools"
	[[ "$out" == /* ]] || out="$PWD/$out"
	local root mod status=0 start="$EPOCHREALTIME"
	root="$(tinygo_root)"
	mod="$(modfile "$pkg")"
	(cd "$pkg" && TINYGOROOT="$root" GOFLAGS="$("$GO" env GOFLAGS) -modfile=$mod" \
		"$TINYGO" build "${flags[@]}" -o "$out" .) 2>&1 | grep -v 'is not a recognized feature for this target' >&2 || true
	[[ -f "$out" ]] || status=1
	rm -rf "$(dirname "$mod")"
	((status == 0)) || return 1
	log "$pkg -> $out: $(stat -c %s "$out") bytes in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s (without: ${WITHOUT[*]:-none})"
}

# check builds and runs each probe with every patch and without the patch it needs.
check() {
	local probes="$ROOT/policies/mutating-admission-policy/internal/tinygoprobe" tmp fails=0
	tmp="$(mktemp -d)"
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	(cd "$ROOT" && "$GO" build -o "$tmp/wasirun" ./internal/tools/wasirun) || die "go build ./internal/tools/wasirun failed"
	# probe, patch left out ("" = none), what the run or the build must say
	local -a table=(
		"cel||ok"
		"cel|sliceof|unimplemented: reflect.SliceOf()"
		"cel|newat|unimplemented: reflect.New()"
		"cel|nomethodbyname|unimplemented: (reflect.Type).MethodByName()"
		"cel|costlimit|panic: operation cancelled: actual cost limit exceeded"
		"cel|parserabort|panic: More than 100 syntax errors"
		"cel|antlrlexer|panic: LexerNoViableAltException"
		"smd||ok"
		"smd|nojsoniter|undefined symbol: reflect.unsafe_New"
		"celk8s||ok"
		"celk8s|nonet|package net/http is not in std"
	)
	local row probe without want got
	for row in "${table[@]}"; do
		IFS='|' read -r probe without want <<<"$row"
		WITHOUT=()
		[[ -n "$without" ]] && WITHOUT=("$without")
		got="$tmp/$probe-${without:-all}"
		# TinyGo's wasip1 target with the MAP module's 8 MiB stack: the cel probe parses
		# expressions nested 250 deep, which overflow wasm-ld's default 64 KiB
		if build "$got.wasm" "$probes/$probe" -target="$ROOT/policies/mutating-admission-policy/tinygo/wasip1-map.json" -scheduler=none -no-debug >"$got.log" 2>&1; then
			"$tmp/wasirun" "$got.wasm" >>"$got.log" 2>&1 || true
		fi
		local pass=0
		if [[ -z "$without" ]]; then
			grep -q '^ok' "$got.log" && pass=1
		elif grep -qF "$want" "$got.log" && ! grep -q '^ok' "$got.log"; then
			pass=1
		fi
		if ((pass == 1)); then
			log "PASS $probe without ${without:-nothing}: $(grep -m1 -F "$want" "$got.log" | cut -c1-160)"
		else
			log "FAIL $probe without ${without:-nothing}: want \"$want\", got:"
			tail -15 "$got.log" | sed 's/^/    /' >&2
			fails=$((fails + 1))
		fi
	done
	((fails == 0)) || die "$fails of ${#table[@]} probe checks failed"
	log "all ${#table[@]} probe checks passed"
}

WITHOUT=()
OUT=""
if [[ "${1:-}" == --check ]]; then
	check
	exit
fi
while (($# > 0)); do
	case "$1" in
	--without) WITHOUT+=("$2"); shift 2 ;;
	-o) OUT="$2"; shift 2 ;;
	--) shift; break ;;
	-*) die "unknown flag $1" ;;
	*) PKG="$1"; shift ;;
	esac
done
[[ -n "$OUT" && -n "${PKG:-}" ]] || die "usage: $0 [--without NAME]... -o OUT PKGDIR [-- TINYGO-FLAGS...]  |  $0 --check"
build "$OUT" "$PKG" "$@"
