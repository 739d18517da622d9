#!/usr/bin/env bash
# build-policies.sh builds every policy of the repository into policy.wasm, next to its sources.
#
# A policy is a directory below examples/, policies/ or test/testdata/policies/ that holds a file
# named policy.build; the one word in it is the build kind:
#   tinygo-wasi         tinygo build -target=wasi -no-debug                  (how Kubewarden builds)
#   tinygo-wasi-legacy  tinygo build -target=wasip1 -buildmode=wasi-legacy -scheduler=none -no-debug
#   go-wasip1           GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s
#   go-wasi             GOOS=wasip1 GOARCH=wasm go build -trimpath -ldflags=-s   (a WASI command: executionMode wasi)
#   opa-wasm            opa build -t wasm -e ENTRYPOINT *.rego utility/*.rego, policy.wasm taken from the bundle
#                       (executionMode opa or gatekeeper); ENTRYPOINT is the one line of the file `entrypoint`
#                       next to policy.build (policy/main for opa, policy/violation for gatekeeper, as
#                       Kubewarden's Makefile.p-rego); opa comes from scripts/install-opa.sh
# The compiler writes policy.raw.wasm; when the directory has metadata.yml and a tollgate binary with
# an `annotate` command is available, `tollgate annotate` writes policy.wasm from it (with
# README.md as usage when present); otherwise policy.raw.wasm is copied to policy.wasm.
#
# A policy directory that also holds wasm-opt.args (one line of wasm-opt flags, e.g.
# `--all-features -Oz`) is built a second time the way Kubewarden's CI builds policies, into
# policy.opt.raw.wasm and (annotated as above) policy.opt.wasm: the compiler output goes through
# binaryen 116's wasm-opt (scripts/install-binaryen.sh) with those flags, and the standard-Go kinds
# are compiled with Kubewarden's flags for that build, -gcflags=all="-B " -ldflags="-w -s" (go-wasi:
# exactly `GOOS=wasip1 GOARCH=wasm go build -gcflags=all="-B " -ldflags="-w -s"`; go-wasip1 keeps
# -buildmode=c-shared). TinyGo and opa builds are optimized from policy.raw.wasm as they are.
#
# A standard-Go policy directory that also holds strip-protobuf is compiled against a copy of
# k8s.io/api without its generated protobuf code (every generated.pb.go but those of the packages
# strip-protobuf lists, one per line, e.g. authentication/v1 when another dependency's protobuf code
# calls it): a Wasm policy reads and writes JSON only, and those methods, kept alive by interfaces,
# are a third of the MutatingAdmissionPolicy module's code. The copy is made once per k8s.io/api
# version and keep list, outside the repository ($TOOLS_DIR/k8s-api-noproto-*), and the build uses a
# temporary go.mod (-modfile) that replaces k8s.io/api with it; the policy's own go.mod, and so its
# native tests, keep the real module (RATIONALE.md "Why is the MAP module built without k8s.io/api's
# protobuf code?"). The wasm-opt.args build below compiles with Kubewarden's commands as they are.
#
# Build cache. Every output is kept in a content-addressed cache outside the repository
# ($TOLLGATE_BUILD_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/builds), shared by every
# clone and branch on the machine. The key of a compiler output is a SHA-256 over the policy's
# sources (every file of its directory and of its go.mod's local `replace` targets but tests,
# testdata, *.md, metadata.yml and built outputs: so go:embed'ed data counts), the build kind's recipe
# (flags, wasm-opt.args, RECIPE_VERSION below) and the versions of the tools it runs (Go, TinyGo,
# LLVM and the Debian libraries TinyGo links, opa, binaryen). An annotated module's key is its
# compiler output's key, metadata.yml, README.md and the annotate code (cmd/tollgate/annotate.go and
# the packages it imports, or the TOLLGATE binary). A policy whose outputs are all in the cache is
# copied from it ("from cache"), one whose outputs are already there is "up to date"; only the rest
# is built, and then needs its tools, which are installed only then. Entries are written atomically
# (a temporary file renamed) with a SHA-256 next to them; an entry whose checksum does not match is
# dropped and rebuilt. Entries unused for 30 days are removed; `make clean-cache` removes them all.
#
# Usage: scripts/build-policies.sh [-f] [--no-wasm-opt] [DIR...]
#   -f             rebuild even what the cache holds (and store the new outputs)
#   --no-wasm-opt  skip the wasm-opt.args builds (policy.opt.wasm): `make demo` does not serve them
#   DIR            build only these policy directories
# Environment:
#   TINYGO          the tinygo binary (default: where scripts/install-tools.sh puts it, installed when missing)
#   OPA             the opa binary (default: where scripts/install-opa.sh puts it, built there when missing)
#   GO              the go command (default: go)
#   TOLLGATE        a tollgate binary for annotate (default: bin/tollgate, built from ./cmd/tollgate
#                   when that has an annotate command and a module must be annotated)
#   POLICY_JOBS     builds run at the same time (default 2, at most 2)
#   WASM_OPT        the wasm-opt for wasm-opt.args (default: scripts/install-binaryen.sh's, installed when missing)
#   TOLLGATE_BUILD_CACHE  the build cache (see above)
#   MAP_BUILD       tinygo (default): policies/mutating-admission-policy, the built-in
#                   builtin://mutating-admission-policy that embed-builtins.sh embeds, is built with
#                   TinyGo by scripts/build-map-tinygo.sh (kind map-tinygo below, issue 31); go: as
#                   its policy.build says (standard Go), the reference for tests and benchmarks, not
#                   shipped. Both outputs stay in the cache: switching back is "from cache".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TINYGO_VERSION="${TINYGO_VERSION:-0.41.1}"
# HOME may be unset in a stripped CI environment: fall back to the account's home directory.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
TINYGO="${TINYGO:-$TOOLS_DIR/tinygo-$TINYGO_VERSION/bin/tinygo}"
GO="${GO:-go}"
JOBS="${POLICY_JOBS:-2}"
MAP_BUILD="${MAP_BUILD:-tinygo}"
case "$MAP_BUILD" in go | tinygo) ;; *) printf 'build-policies: error: MAP_BUILD=%s (want go or tinygo)\n' "$MAP_BUILD" >&2; exit 1 ;; esac
((JOBS >= 1 && JOBS <= 2)) || JOBS=2
SEARCH_DIRS=(examples policies test/testdata/policies)

log() { printf 'build-policies: %s\n' "$*" >&2; }
die() { printf 'build-policies: error: %s\n' "$*" >&2; exit 1; }

CACHE_DIR="${TOLLGATE_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/builds}"
# RECIPE_VERSION is part of every cache key: bump it when a change to this script changes what a
# recipe produces in a way the recipe_* lines below do not show.
RECIPE_VERSION=1

FORCE=0
WASM_OPT_BUILDS=1
while (($# > 0)); do
	case "$1" in
	-f) FORCE=1 ;;
	--no-wasm-opt) WASM_OPT_BUILDS=0 ;;
	-*) die "unknown option $1 (usage: scripts/build-policies.sh [-f] [--no-wasm-opt] [DIR...])" ;;
	*) break ;;
	esac
	shift
done

# find_policies prints the policy directories, sorted, relative to the repository root.
find_policies() {
	local d existing=()
	for d in "${SEARCH_DIRS[@]}"; do
		[[ -d "$d" ]] && existing+=("$d")
	done
	((${#existing[@]} > 0)) || return 0
	find "${existing[@]}" -name policy.build -type f -printf '%h\n' | sort
}

# source_dirs prints dir and the local directories its go.mod replaces modules with.
source_dirs() {
	local dir="$1" target
	printf '%s\n' "$dir"
	[[ -f "$dir/go.mod" ]] || return 0
	# `replace a => ../b` and `replace a v1 => ./b` lines, inside or outside a replace block.
	sed -nE 's#^[[:space:]]*(replace[[:space:]]+)?[^[:space:]]+([[:space:]]+v[^[:space:]]+)?[[:space:]]+=>[[:space:]]+(\.{1,2}/[^[:space:]]*)[[:space:]]*$#\3#p' \
		"$dir/go.mod" | while read -r target; do
		[[ -d "$dir/$target" ]] && printf '%s\n' "$dir/$target"
	done
}

# sources_digest prints a SHA-256 over the paths (relative to the repository) and contents of dir's
# sources: every file of dir and of its local replace targets but tests (*_test.go, *_test.rego),
# testdata and hidden directories, documentation (*.md, metadata.yml: they are annotated, not
# compiled) and what the build writes.
sources_digest() {
	local dir="$1" d
	source_dirs "$dir" | while IFS= read -r d; do
		find "$d" \( -path "$d/*" \( -name testdata -o -name '.*' \) \) -prune -o -type f \
			-not -name '*_test.go' -not -name '*_test.rego' -not -name '*.md' -not -name metadata.yml \
			-not -name '*.wasm' -not -name '*.tmp' -not -name bundle.tar.gz -print
	done | LC_ALL=C sort -u | xargs -d '\n' -r sha256sum | sha256sum | cut -d' ' -f1
}

digest() { sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------------------------------------
# The build cache (see the top of this file): ENTRY.wasm and ENTRY.sha256, ENTRY being
# $CACHE_DIR/<first two hex digits of the key>/<key>.
# ---------------------------------------------------------------------------------------------
cache_entry() { printf '%s/%s/%s\n' "$CACHE_DIR" "${1:0:2}" "$1"; }

# cache_has reports whether the cache holds key, with the checksum it was stored with; an entry
# that does not match it (corrupt, or cut short) is removed.
cache_has() {
	local e
	e="$(cache_entry "$1")"
	[[ -f "$e.wasm" && -f "$e.sha256" ]] || return 1
	if [[ "$(digest <"$e.wasm")" != "$(cat "$e.sha256")" ]]; then
		log "cache entry $e.wasm does not match its checksum: removed, it is rebuilt"
		rm -f "$e.wasm" "$e.sha256"
		return 1
	fi
}

# cache_put stores file under key: the module and then its checksum, each renamed into place.
cache_put() {
	local key="$1" file="$2" e tmp
	e="$(cache_entry "$key")"
	mkdir -p "${e%/*}"
	tmp="$(mktemp "${e%/*}/.put.XXXXXX")"
	cp "$file" "$tmp" && mv -f "$tmp" "$e.wasm" &&
		digest <"$file" >"$tmp" && mv -f "$tmp" "$e.sha256" || { rm -f "$tmp"; return 1; }
}

# cache_get copies key's entry to dest unless dest holds it already; it prints "restored" or
# "same". The entry's time is renewed (entries unused for 30 days are removed).
cache_get() {
	local e
	e="$(cache_entry "$1")"
	touch -c "$e.wasm" "$e.sha256" 2>/dev/null || true
	if cmp -s "$e.wasm" "$2"; then
		printf 'same\n'
		return 0
	fi
	cp "$e.wasm" "$2.tmp" && mv -f "$2.tmp" "$2" && printf 'restored\n'
}

# ---------------------------------------------------------------------------------------------
# Toolchain versions, part of the keys of the kinds that use them (computed once per run).
# ---------------------------------------------------------------------------------------------
declare -A TOOLCHAIN=()
toolchain() {
	local name="$1"
	if [[ -z "${TOOLCHAIN[$name]:-}" ]]; then
		case "$name" in
		go) TOOLCHAIN[go]="go $("$GO" env GOVERSION GOFLAGS | tr '\n' ' ')" ;;
		tinygo)
			toolchain go
			# TinyGo compiles with Go's standard library, LLVM and Debian's wasi-libc and compiler-rt,
			# and runs the wasm-opt on PATH (Debian's binaryen).
			TOOLCHAIN[tinygo]="tinygo $TINYGO_VERSION ${TINYGO_VERSION_OVERRIDE:-} ${TOOLCHAIN[go]} $(dpkg-query -W -f='${Package}=${Version} ' \
				llvm-19-dev clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc binaryen 2>/dev/null || true)"
			[[ "$TINYGO" == "$TOOLS_DIR/tinygo-$TINYGO_VERSION/bin/tinygo" ]] || TOOLCHAIN[tinygo]+=" $TINYGO $(digest <"$TINYGO" 2>/dev/null)"
			;;
		opa)
			if [[ -n "${OPA:-}" ]]; then
				TOOLCHAIN[opa]="opa $("$OPA" version 2>/dev/null | head -1)"
			else
				TOOLCHAIN[opa]="opa $(pinned_version OPA_VERSION install-opa.sh)"
			fi
			;;
		binaryen)
			if [[ -n "${WASM_OPT:-}" ]]; then
				TOOLCHAIN[binaryen]="wasm-opt $("$WASM_OPT" --version 2>/dev/null)"
			else
				TOOLCHAIN[binaryen]="binaryen $(pinned_version BINARYEN_VERSION install-binaryen.sh)"
			fi
			;;
		esac
	fi
	printf '%s\n' "${TOOLCHAIN[$name]}"
}

# pinned_version prints the version an install script installs: $var from the environment, or
# the script's default (the `VAR="${VAR:-x}"` line).
pinned_version() {
	local var="$1" script="$ROOT/scripts/$2"
	if [[ -n "${!var:-}" ]]; then
		printf '%s\n' "${!var}"
	elif [[ -f "$script" ]]; then
		sed -nE "s/^$var=\"\\\$\\{$var:-([^}]*)\\}\"$/\\1/p" "$script" | head -1
	fi
}

# ---------------------------------------------------------------------------------------------
# Build kinds. A kind KIND (the word in policy.build) is three functions:
#   recipe_KIND      prints what besides the sources decides the compiler's output: its command
#                    and flags, and the versions of the tools it runs (`toolchain NAME`)
#   tools_KIND       prints the tools a build needs installed: tinygo, opa (none for Go)
#   compile_KIND OUT builds OUT in the policy directory (the current directory)
# and, for a kind whose wasm-opt.args build compiles differently (standard Go: Kubewarden's flags),
#   optrecipe_KIND, optcompile_KIND OUT   as above, for the input of wasm-opt
# (otherwise wasm-opt optimizes policy.raw.wasm). A new kind slots in by defining them.
# ---------------------------------------------------------------------------------------------
recipe_tinygo-wasi() { printf 'tinygo build -target=wasi -no-debug\n'; toolchain tinygo; }
tools_tinygo-wasi() { printf 'tinygo\n'; }
compile_tinygo-wasi() { "$TINYGO" build -o "$1" -target=wasi -no-debug .; }

recipe_tinygo-wasi-legacy() { printf 'tinygo build -target=wasip1 -buildmode=wasi-legacy -scheduler=none -no-debug\n'; toolchain tinygo; }
tools_tinygo-wasi-legacy() { printf 'tinygo\n'; }
compile_tinygo-wasi-legacy() { "$TINYGO" build -o "$1" -target=wasip1 -buildmode=wasi-legacy -scheduler=none -no-debug .; }

# go_build runs GOOS=wasip1 GOARCH=wasm go build with the given flags in the policy directory, with
# the temporary go.mod of strip-protobuf (noproto_modfile) when use_noproto is 1.
go_build() {
	local use_noproto="$1" modfile="" status=0
	shift
	if ((use_noproto == 1)); then
		modfile="$(cd "$ROOT" && noproto_modfile "$DIR")" || return 1
	fi
	env GOOS=wasip1 GOARCH=wasm "$GO" build ${modfile:+"-modfile=$modfile"} "$@" . || status=$?
	[[ -z "$modfile" ]] || rm -rf "${modfile%/*}"
	return "$status"
}

recipe_go-wasip1() { printf 'go build -buildmode=c-shared -trimpath -ldflags=-s (strip-protobuf)\n'; toolchain go; }
tools_go-wasip1() { :; }
compile_go-wasip1() { go_build 1 -buildmode=c-shared -trimpath -ldflags=-s -o "$1"; }
optrecipe_go-wasip1() { printf 'go build -buildmode=c-shared -gcflags=all=-B  -ldflags=-w -s\n'; toolchain go; }
optcompile_go-wasip1() { go_build 0 -buildmode=c-shared "-gcflags=all=-B " "-ldflags=-w -s" -o "$1"; }

recipe_go-wasi() { printf 'go build -trimpath -ldflags=-s (strip-protobuf)\n'; toolchain go; }
tools_go-wasi() { :; }
compile_go-wasi() { go_build 1 -trimpath -ldflags=-s -o "$1"; }
optrecipe_go-wasi() { printf 'go build -gcflags=all=-B  -ldflags=-w -s\n'; toolchain go; }
optcompile_go-wasi() { go_build 0 "-gcflags=all=-B " "-ldflags=-w -s" -o "$1"; }

recipe_opa-wasm() { printf 'opa build -t wasm -e %s *.rego utility/*.rego\n' "$(tr -d '[:space:]' <entrypoint 2>/dev/null || true)"; toolchain opa; }
tools_opa-wasm() { printf 'opa\n'; }
compile_opa-wasm() {
	local entrypoint
	entrypoint="$(tr -d '[:space:]' <entrypoint 2>/dev/null || true)"
	if [[ -z "$entrypoint" ]]; then
		printf 'build kind opa-wasm needs the entrypoint (e.g. policy/main) in %s/entrypoint\n' "$DIR"
		return 1
	fi
	(
		set -euo pipefail
		shopt -s nullglob
		local files=(*.rego utility/*.rego) src=() f
		for f in "${files[@]}"; do [[ "$f" == *_test.rego ]] || src+=("$f"); done
		trap 'rm -f bundle.tar.gz' EXIT
		"$OPA_BIN" build -t wasm -e "$entrypoint" -o bundle.tar.gz "${src[@]}"
		tar -xzf bundle.tar.gz -O /policy.wasm >"$1"
	)
}

KINDS="tinygo-wasi, tinygo-wasi-legacy, go-wasip1, go-wasi or opa-wasm"

# map-tinygo is the kind of policies/mutating-admission-policy when MAP_BUILD=tinygo (the default,
# issue 31; no policy.build names it): its package tinygo/ (on package jsonengine) built with TinyGo by
# scripts/build-map-tinygo.sh, against the dependencies patched at build time by
# scripts/tinygo-patches (`make map-tinygo-engine`'s command), so that embed-builtins.sh embeds that
# module as builtin://mutating-admission-policy. The key holds the patches (not their README.md) and
# the script that applies them besides the sources (the policy directory holds tinygo/ and jsonengine/) and TinyGo.
MAP_DIR=policies/mutating-admission-policy
recipe_map-tinygo() {
	printf 'scripts/build-map-tinygo.sh tinygo -- -target=./wasip1-map.json -buildmode=c-shared -scheduler=none -no-debug\n'
	# the patches' documentation (README.md) is not part of what is built
	(cd "$ROOT" && find scripts/build-map-tinygo.sh scripts/tinygo-patches -type f -not -name '*.md' | LC_ALL=C sort | xargs -d '\n' sha256sum)
	toolchain tinygo
}
tools_map-tinygo() { printf 'tinygo\n'; }
compile_map-tinygo() {
	TINYGO="$TINYGO" "$ROOT/scripts/build-map-tinygo.sh" -o "$PWD/$1" tinygo -- \
		-target=./wasip1-map.json -buildmode=c-shared -scheduler=none -no-debug
}

# policy_kind prints dir's build kind: the word in its policy.build, but map-tinygo for the
# MutatingAdmissionPolicy built-in when MAP_BUILD=tinygo.
policy_kind() {
	local dir="$1"
	if [[ "$dir" == "$MAP_DIR" && "$MAP_BUILD" == tinygo ]]; then
		printf 'map-tinygo\n'
		return
	fi
	tr -d '[:space:]' <"$dir/policy.build"
}

# noproto_modfile prints, for a policy directory with strip-protobuf, the path of a temporary
# go.mod (with its go.sum) that replaces k8s.io/api with a copy without its generated protobuf code
# (see the top of this file); nothing for other directories. The caller removes its directory.
noproto_modfile() {
	local dir="$1"
	[[ -f "$dir/strip-protobuf" ]] || return 0
	local ver src keep key dst tmp mod
	(cd "$dir" && "$GO" mod download k8s.io/api) || return 1 # a fresh module cache: .Dir is empty until then
	ver="$(cd "$dir" && "$GO" list -m -f '{{.Version}}' k8s.io/api)"
	src="$(cd "$dir" && "$GO" list -m -f '{{.Dir}}' k8s.io/api)"
	[[ -n "$ver" && -d "$src" ]] || { printf 'build-policies: %s: strip-protobuf: k8s.io/api is not a dependency\n' "$dir" >&2; return 1; }
	keep="$(grep -v '^[[:space:]]*\(#\|$\)' "$dir/strip-protobuf" | tr -d '[:blank:]' | sort -u)"
	key="$(printf '%s\n%s\n' "$ver" "$keep" | sha256sum | cut -c1-12)"
	dst="$TOOLS_DIR/k8s-api-noproto-$ver-$key"
	if [[ ! -f "$dst/.complete" ]]; then
		mkdir -p "$TOOLS_DIR"
		tmp="$(mktemp -d "$TOOLS_DIR/.k8s-api-noproto.XXXXXX")"
		cp -r "$src/." "$tmp/"
		chmod -R u+w "$tmp"
		find "$tmp" -name '*_test.go' -delete
		local f rel
		while IFS= read -r f; do
			rel="${f#"$tmp"/}"
			rel="${rel%/generated.pb.go}"
			grep -qxF "$rel" <<<"$keep" || rm -f "$f"
		done < <(find "$tmp" -name generated.pb.go)
		touch "$tmp/.complete"
		mv -T "$tmp" "$dst" 2>/dev/null || rm -rf "$tmp" # another build made it first
	fi
	mod="$(mktemp -d)"
	cp "$dir/go.mod" "$mod/noproto.mod"
	cp "$dir/go.sum" "$mod/noproto.sum"
	printf '\nreplace k8s.io/api => %s\n' "$dst" >>"$mod/noproto.mod"
	# the policy's relative replace targets, made absolute for the go.mod in the temporary directory
	sed -i -E "s#=>[[:space:]]+(\.{1,2}/[^[:space:]]*)#=> $ROOT/$dir/\1#" "$mod/noproto.mod"
	printf '%s\n' "$mod/noproto.mod"
}


# annotate_digest prints a SHA-256 of what annotating depends on besides the module and its
# metadata: the TOLLGATE binary when one was given, otherwise the annotate command's code: its file,
# the Go files of host/metadata (which does the work) and of the packages of this module it imports,
# and go.sum for the others. (A change to annotate.go's imports should keep this list in step.)
annotate_digest() {
	if [[ -n "${TOLLGATE:-}" ]]; then
		digest <"$TOLLGATE"
		return
	fi
	{
		printf '%s\n' cmd/tollgate/annotate.go go.sum
		"$GO" list -deps -f '{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}' \
			./host/metadata | sed "s#^$ROOT/##"
	} | LC_ALL=C sort -u | xargs -d '\n' -r sha256sum | digest
}

# plan computes the keys of dir's outputs into KEY[dir/OUTPUT] (OUTPUT: raw, final, optraw, optfinal;
# final and optfinal only when the module is annotated) and sets NEED to the work left: "" when the
# cache holds every output, otherwise what the missing ones need (compile, tinygo, opa, opt,
# annotate). It runs in the main shell (not in $(...)): KEY and TOOLCHAIN are filled in.
declare -A KEY=()
plan() {
	local dir="$1" kind src base need=()
	kind="$(policy_kind "$dir")"
	NEED=""
	declare -F "compile_$kind" >/dev/null || return 0 # build_one reports it
	src="$(sources_digest "$dir")"
	base="tollgate build-policies recipe $RECIPE_VERSION"
	KEY[$dir/raw]="$(printf '%s\nraw %s\n%s\n%s\n' "$base" "$kind" "$(cd "$dir" && "recipe_$kind")" "$src" | digest)"
	local annotated=0
	[[ -n "$TOLLGATE_BIN" && -f "$dir/metadata.yml" ]] && annotated=1
	if ((annotated == 1)); then
		KEY[$dir/final]="$(printf '%s\nannotate\n%s\n%s\n%s\n%s\n' "$base" "${KEY[$dir/raw]}" "$(digest <"$dir/metadata.yml")" \
			"$( [[ -f "$dir/README.md" ]] && digest <"$dir/README.md")" "$ANNOTATE_DIGEST" | digest)"
	fi
	local outs=(raw final)
	if ((WASM_OPT_BUILDS == 1)) && [[ -f "$dir/wasm-opt.args" ]]; then
		local optrecipe=""
		declare -F "optrecipe_$kind" >/dev/null && optrecipe="$(cd "$dir" && "optrecipe_$kind")"
		KEY[$dir/optraw]="$(printf '%s\nopt %s\n%s\n%s\nwasm-opt %s\n%s\n%s\n' "$base" "$kind" "$(cd "$dir" && "recipe_$kind")" "$optrecipe" \
			"$(cat "$dir/wasm-opt.args")" "$(toolchain binaryen)" "$src" | digest)"
		if ((annotated == 1)); then
			KEY[$dir/optfinal]="$(printf '%s\nannotate\n%s\n%s\n%s\n%s\n' "$base" "${KEY[$dir/optraw]}" "$(digest <"$dir/metadata.yml")" \
				"$( [[ -f "$dir/README.md" ]] && digest <"$dir/README.md")" "$ANNOTATE_DIGEST" | digest)"
		fi
		outs+=(optraw optfinal)
	fi
	local o
	for o in "${outs[@]}"; do
		[[ -n "${KEY[$dir/$o]:-}" ]] || continue
		if ((FORCE == 1)) || ! cache_has "${KEY[$dir/$o]}"; then
			case "$o" in
			raw) need+=(compile $(cd "$dir" && "tools_$kind")) ;;
			optraw) need+=(opt) ;;
			final | optfinal) need+=(annotate) ;;
			esac
		fi
	done
	NEED="${need[*]}"
}

# fetch_or_make puts output o of DIR in place as file: from the cache when it holds it, otherwise
# made by running the rest of the arguments in DIR and stored. It prints "same", "restored" or
# "built"; a failing command prints its output, prefixed, and fails.
fetch_or_make() {
	local o="$1" file="$2" key="${KEY[$DIR/$1]}" out
	shift 2
	if ((FORCE == 0)) && cache_has "$key"; then
		cache_get "$key" "$DIR/$file"
		return
	fi
	# the temporary output ends in .wasm: TinyGo picks the output format by the extension
	local tmp="${file%.wasm}.tmp.wasm"
	out="$(mktemp)"
	if ! (cd "$DIR" && rm -f "$tmp" && "$@" "$tmp") >"$out" 2>&1; then
		sed 's/^/    /' "$out" >&2
		rm -f "$out" "$DIR/$tmp"
		return 1
	fi
	rm -f "$out"
	mv -f "$DIR/$tmp" "$DIR/$file"
	cache_put "$key" "$DIR/$file" || log "could not store $DIR/$file in the cache $CACHE_DIR (built anyway)"
	printf 'built\n'
}

# annotate writes OUT from IN (in the policy directory) with tollgate annotate. A build started
# before bin/tollgate was ready (the MAP TinyGo compile, started as soon as TinyGo is there) waits
# here for it: TOLLGATE_STATE is a directory where build_tollgate's outcome appears ("ok" or "failed").
annotate() {
	local in="$1" out="$2"
	if [[ -n "${TOLLGATE_STATE:-}" ]]; then
		while [[ ! -e "$TOLLGATE_STATE/ok" ]]; do
			[[ ! -e "$TOLLGATE_STATE/failed" ]] || { printf 'bin/tollgate was not built (see go build ./cmd/tollgate above)\n'; return 1; }
			sleep 0.2
		done
	fi
	local -a cmd=("$TOLLGATE_BIN" annotate -m metadata.yml)
	[[ -f README.md ]] && cmd+=(-u README.md)
	"${cmd[@]}" -o "$out" "$in" || { printf '%s -o %s %s failed\n' "${cmd[*]}" "$out" "$in"; return 1; }
}

# wasm_opt writes OUT from the compiler output with the flags of wasm-opt.args: standard Go is
# compiled again with Kubewarden's flags first (optcompile_KIND), the other kinds' policy.raw.wasm is
# optimized as it is.
wasm_opt() {
	local kind="$1" out="$2" input=policy.raw.wasm
	local -a flags
	read -r -a flags <wasm-opt.args || true
	((${#flags[@]} > 0)) || { printf '%s/wasm-opt.args is empty (want wasm-opt flags, e.g. --all-features -Oz)\n' "$DIR"; return 1; }
	if declare -F "optcompile_$kind" >/dev/null; then
		input=policy.opt.go.wasm
		"optcompile_$kind" "$input" || { rm -f "$input"; return 1; }
	fi
	"$WASM_OPT_BIN" "${flags[@]}" -o "$out" "$input" || { printf '%s %s -o %s %s failed\n' "$WASM_OPT_BIN" "${flags[*]}" "$out" "$input"; rm -f policy.opt.go.wasm; return 1; }
	rm -f policy.opt.go.wasm
}

# copy_to is the "annotation" of a module without metadata.yml (or without tollgate annotate).
copy_to() { cp "$1" "$2"; }

# build_one puts DIR's outputs in place, from the cache or built; it prints one line per module
# (what it did, seconds, size) and what failed, and writes to the file $2 what it did to the policy
# as a whole: "built" when anything was built, else "cached" when anything came from the cache, else
# "same".
build_one() {
	DIR="$1"
	local state_file="$2" kind start how states=""
	kind="$(policy_kind "$DIR")"
	start="$EPOCHREALTIME"
	if ! declare -F "compile_$kind" >/dev/null; then
		printf 'build-policies: FAILED %s: unknown build kind %q in %s/policy.build (want %s)\n' "$DIR" "$kind" "$DIR" "$KINDS" >&2
		return 1
	fi
	how="$(fetch_or_make raw policy.raw.wasm "compile_$kind")" ||
		{ printf 'build-policies: FAILED %s (%s): %s\n' "$DIR" "$kind" "$(cd "$DIR" && "recipe_$kind" | head -1)" >&2; return 1; }
	how+=" $(finish policy.raw.wasm policy.wasm final)" || return 1
	states+=" $(report "$kind" policy.wasm "$how" "$start")"
	if [[ -n "${KEY[$DIR/optraw]:-}" ]]; then
		start="$EPOCHREALTIME"
		how="$(fetch_or_make optraw policy.opt.raw.wasm wasm_opt "$kind")" ||
			{ printf 'build-policies: FAILED %s (%s, wasm-opt %s)\n' "$DIR" "$kind" "$(cat "$DIR/wasm-opt.args" 2>/dev/null)" >&2; return 1; }
		how+=" $(finish policy.opt.raw.wasm policy.opt.wasm optfinal)" || return 1
		states+=" $(report "wasm-opt $(cat "$DIR/wasm-opt.args")" policy.opt.wasm "$how" "$start")"
	fi
	case "$states" in
	*built*) echo built ;;
	*restored*) echo cached ;;
	*) echo same ;;
	esac >"$state_file"
}

# finish writes final from raw: annotated (through the cache) when DIR has a key for it, copied
# otherwise. It prints what fetch_or_make did ("same", "restored", "built") and "annotated" or
# "copied".
finish() {
	local raw="$1" final="$2" o="$3" how
	if [[ -z "${KEY[$DIR/$o]:-}" ]]; then
		if cmp -s "$DIR/$raw" "$DIR/$final"; then
			printf 'same copied\n'
		else
			cp "$DIR/$raw" "$DIR/$final.tmp" && mv -f "$DIR/$final.tmp" "$DIR/$final" && printf 'restored copied\n'
		fi
		return
	fi
	how="$(fetch_or_make "$o" "$final" annotate "$raw")" ||
		{ printf 'build-policies: FAILED %s: %s annotate -m metadata.yml -o %s %s\n' "$DIR" "$TOLLGATE_BIN" "$final" "$raw" >&2; return 1; }
	printf '%s annotated\n' "$how"
}

# report prints the line of one module (what was done, seconds, size) to standard error, and to
# standard output the state of the module: "built" when its compilation or annotation was, else
# "restored" when either came from the cache, else "same".
report() {
	local what="$1" file="$2" how="$3" start="$4" state label
	case "$how" in
	*built*) state=built label="built" ;;
	*restored*) state=restored label="from cache" ;;
	*) state=same label="up to date" ;;
	esac
	printf 'build-policies: %-45s %-24s %6s s %8s KB  %-10s (%s)\n' "$DIR" "$what" \
		"$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')" \
		"$(($(stat -c %s "$DIR/$file") / 1024))" "$label" "${how##* }" >&2
	printf '%s\n' "$state"
}

# find_tool prints the path of a tool: the value of the environment variable named $1 when it is set
# (it must be an executable), otherwise the last line printed by scripts/$2, which installs the
# tool into the tools cache when it is not there.
find_tool() {
	local var="$1" script="$2"
	if [[ -n "${!var:-}" ]]; then
		[[ -x "${!var}" ]] || die "$var=${!var} is not an executable"
		printf '%s\n' "${!var}"
		return 0
	fi
	local out
	out="$("$ROOT/scripts/$script")" || die "scripts/$script failed"
	printf '%s\n' "${out##*$'\n'}"
}

# find_tollgate sets TOLLGATE_BIN to the tollgate binary to annotate with, or "" when there is
# none with an annotate command. bin/tollgate is only built (go build) by build_tollgate.
find_tollgate() {
	TOLLGATE_BIN=""
	if [[ -n "${TOLLGATE:-}" ]]; then
		[[ -x "$TOLLGATE" ]] || die "TOLLGATE=$TOLLGATE is not an executable"
		TOLLGATE_BIN="$TOLLGATE"
		return 0
	fi
	# Until cmd/tollgate has an annotate command, policies are copied unannotated.
	if grep -qs -E 'newAnnotateCmd|"annotate' cmd/tollgate/*.go; then
		TOLLGATE_BIN="$ROOT/bin/tollgate"
	fi
}

# build_tollgate builds bin/tollgate (incrementally) when it is the binary to annotate with.
build_tollgate() {
	[[ "$TOLLGATE_BIN" == "$ROOT/bin/tollgate" ]] || return 0
	CGO_ENABLED=0 "$GO" build -trimpath -o bin/tollgate ./cmd/tollgate || die "go build ./cmd/tollgate failed (needed for tollgate annotate)"
	bin/tollgate annotate --help >/dev/null 2>&1 ||
		die "bin/tollgate has no working annotate command (bin/tollgate annotate --help fails)"
}


# check_tinygo makes sure TinyGo and its seeded libraries are there (tinygo clean removes them),
# installing TinyGo and the Debian packages it needs (only those) when they are missing.
check_tinygo() {
	local cache=""
	[[ -x "$TINYGO" ]] && cache="$("$TINYGO" env GOCACHE 2>/dev/null || true)"
	if [[ -z "$cache" || ! -f "$cache/wasi-libc-wasm32-unknown-wasi-generic/lib.a" ||
		! -f "$cache/compiler-rt-wasm32-unknown-wasi-generic/lib.a" ]]; then
		[[ "$TINYGO" == "$TOOLS_DIR/tinygo-$TINYGO_VERSION/bin/tinygo" ]] ||
			die "TinyGo not found at $TINYGO: run \`make tools\` (or scripts/install-tools.sh), or set TINYGO"
		"$ROOT/scripts/install-tools.sh" tinygo >/dev/null || die "scripts/install-tools.sh tinygo failed"
	fi
}

main() {
	local -a dirs
	if (($# > 0)); then
		local d
		for d in "$@"; do
			d="${d%/}"
			[[ -f "$d/policy.build" ]] || die "$d has no policy.build file"
			dirs+=("$d")
		done
	else
		mapfile -t dirs < <(find_policies)
	fi
	if ((${#dirs[@]} == 0)); then
		log "no policies found"
		return 0
	fi
	local start="$EPOCHREALTIME"
	[[ ! -d "$CACHE_DIR" ]] || find "$CACHE_DIR" -type f -mtime +30 -delete 2>/dev/null || true

	local t
	for t in go tinygo opa binaryen; do
		toolchain "$t" >/dev/null # once, here: the keys are computed in subshells
	done
	find_tollgate
	ANNOTATE_DIGEST=""
	[[ -z "$TOLLGATE_BIN" ]] || ANNOTATE_DIGEST="$(annotate_digest)"
	local -a todo=()
	local -A NEEDS=()
	local dir need_tinygo=0 need_opa=0 need_wasm_opt=0 need_tollgate=0 to_build=0
	for dir in "${dirs[@]}"; do
		plan "$dir"
		NEEDS[$dir]="$NEED"
		todo+=("$dir")
		[[ -z "$NEED" ]] || to_build=$((to_build + 1))
		[[ "$NEED" != *tinygo* ]] || need_tinygo=1
		[[ "$NEED" != *opa* ]] || need_opa=1
		[[ "$NEED" != *opt* ]] || need_wasm_opt=1
		[[ "$NEED" != *annotate* ]] || need_tollgate=1
	done
	log "${#dirs[@]} policies: $((${#dirs[@]} - to_build)) in the build cache, $to_build to build, $JOBS at a time (planned in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s)"
	local status
	status="$(mktemp -d)"
	# shellcheck disable=SC2064
	trap "rm -rf '$status'" EXIT
	# The MAP module's TinyGo build is the longest by far (about 210 s wall, mostly one core): it
	# goes first, and starts as soon as TinyGo is there, before tollgate (needed only to annotate it,
	# which waits for it: annotate) and the other tools; the others build beside it on the second core.
	local -a first=() rest=()
	for dir in "${todo[@]}"; do
		if [[ "$dir" == "$MAP_DIR" && "$(policy_kind "$dir")" == map-tinygo ]]; then first+=("$dir"); else rest+=("$dir"); fi
	done
	todo=("${first[@]}" "${rest[@]}")
	local early=0
	((${#first[@]} == 0)) || [[ "${NEEDS[$MAP_DIR]}" != *compile* || "${NEEDS[$MAP_DIR]}" == *opt* ]] || early=1
	# tollgate (for annotate) builds while the tools install: on a fresh machine both download
	# modules from the proxy, and each fills the cores the other leaves idle while it waits.
	TOLLGATE_STATE="$status/tollgate"
	mkdir -p "$TOLLGATE_STATE"
	local tollgate_pid=""
	if ((need_tollgate == 1)); then
		# shellcheck disable=SC2015 # build_tollgate exits (die) on failure: "failed" is written then
		(build_tollgate && touch "$TOLLGATE_STATE/ok" || { touch "$TOLLGATE_STATE/failed"; exit 1; }) &
		tollgate_pid=$!
	else
		touch "$TOLLGATE_STATE/ok"
	fi
	((need_tinygo == 0)) || check_tinygo
	local i=0
	if ((early == 1)); then
		log "$MAP_DIR: TinyGo compile started now (at $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s); annotated when bin/tollgate is built"
		(build_one "$MAP_DIR" "$status/state.0" || touch "$status/fail.0") &
		i=1
	fi
	if ((need_opa == 1)); then
		OPA_BIN="$(find_tool OPA install-opa.sh)" || exit 1
	fi
	if ((need_wasm_opt == 1)); then
		WASM_OPT_BIN="$(find_tool WASM_OPT install-binaryen.sh)" || exit 1
	fi
	if [[ -n "$tollgate_pid" ]] && ! wait "$tollgate_pid"; then
		# an early MAP compile still running stores its output in the cache: wait for it
		((early == 0)) || { log "waiting for the $MAP_DIR compile started early (its output is cached)"; wait || true; }
		exit 1
	fi
	[[ -n "$TOLLGATE_BIN" ]] || log "no tollgate annotate command yet: policy.wasm files are not annotated"

	for dir in "${todo[@]:i}"; do
		while (($(jobs -rp | wc -l) >= JOBS)); do
			wait -n || true
		done
		(build_one "$dir" "$status/state.$i" || touch "$status/fail.$i") &
		i=$((i + 1))
	done
	wait
	local failed=() built=0 cached=0 same=0
	for ((i = 0; i < ${#todo[@]}; i++)); do
		if [[ -e "$status/fail.$i" ]]; then
			failed+=("${todo[$i]}")
			continue
		fi
		case "$(cat "$status/state.$i" 2>/dev/null)" in
		built) built=$((built + 1)) ;;
		cached) cached=$((cached + 1)) ;;
		*) same=$((same + 1)) ;;
		esac
	done
	if ((${#failed[@]} > 0)); then
		die "${#failed[@]} of ${#todo[@]} policies failed to build: ${failed[*]}"
	fi
	local took
	took="$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
	if ((built == 0 && cached == 0)); then
		log "all ${#todo[@]} policies up to date ($took s)"
	else
		log "${#todo[@]} policies: $cached from cache, $built built, $same up to date, in $took s (cache: $CACHE_DIR)"
	fi
}

main "$@"
