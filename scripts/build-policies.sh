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
# A policy whose policy.wasm is newer than all its sources (*.go but *_test.go, go.mod, go.sum,
# *.rego but *_test.rego, entrypoint, policy.build, the sources of local `replace` targets, and metadata.yml and README.md when it is
# annotated) is skipped.
#
# Usage: scripts/build-policies.sh [-f] [DIR...]
#   -f    rebuild even when up to date
#   DIR   build only these policy directories
# Environment:
#   TINYGO          the tinygo binary (default: where scripts/install-tools.sh puts it)
#   OPA             the opa binary (default: where scripts/install-opa.sh puts it, built there when missing)
#   GO              the go command (default: go)
#   TOLLGATE        a tollgate binary for annotate (default: bin/tollgate, built from ./cmd/tollgate
#                   when that has an annotate command)
#   POLICY_JOBS     builds run at the same time (default 2, at most 2)
#   WASM_OPT        the wasm-opt for wasm-opt.args (default: scripts/install-binaryen.sh's, installed when missing)
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
((JOBS >= 1 && JOBS <= 2)) || JOBS=2
SEARCH_DIRS=(examples policies test/testdata/policies)

log() { printf 'build-policies: %s\n' "$*" >&2; }
die() { printf 'build-policies: error: %s\n' "$*" >&2; exit 1; }

FORCE=0
if [[ "${1:-}" == -f ]]; then
	FORCE=1
	shift
fi

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

# up_to_date reports whether dir's policy.wasm is newer than all of its sources, and annotated
# when it should be.
up_to_date() {
	local dir="$1" wasm="$1/policy.wasm"
	[[ -f "$wasm" ]] || return 1
	if [[ -n "$TOLLGATE_BIN" && -f "$dir/metadata.yml" ]] && ! grep -q io.kubewarden.metadata "$wasm"; then
		return 1 # built before annotate existed
	fi
	if [[ -f "$dir/wasm-opt.args" ]] && ! newer_than_sources "$dir" "$dir/policy.opt.wasm"; then
		return 1
	fi
	newer_than_sources "$dir" "$wasm"
}

# newer_than_sources reports whether file exists and is newer than all of dir's sources; with a
# third argument "code", metadata.yml and README.md do not count (they are not compiled).
newer_than_sources() {
	local dir="$1" file="$2" newer
	[[ -f "$file" ]] || return 1
	local -a docs=()
	if [[ "${3:-}" != code && -f "$dir/metadata.yml" ]]; then
		docs=(-o -name metadata.yml -o -name README.md)
	fi
	newer="$(source_dirs "$dir" | xargs -d '\n' -I{} find {} -type f \
		\( \( -name '*.go' -not -name '*_test.go' \) -o \( -name '*.rego' -not -name '*_test.rego' \) -o -name entrypoint \
		-o -name go.mod -o -name go.sum -o -name policy.build -o -name wasm-opt.args -o -name strip-protobuf \
		"${docs[@]}" \) -newer "$file" -print -quit)"
	[[ -z "$newer" ]]
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

# build_one builds one policy; it prints one line, and the compiler's output when it fails.
build_one() {
	local dir="$1" kind start elapsed
	kind="$(tr -d '[:space:]' <"$dir/policy.build")"
	start="$EPOCHREALTIME"
	local out
	out="$(mktemp)"
	local raw="policy.raw.wasm" modfile=""
	local -a cmd
	case "$kind" in
	tinygo-wasi)
		cmd=("$TINYGO" build -o "$raw" -target=wasi -no-debug .)
		;;
	tinygo-wasi-legacy)
		cmd=("$TINYGO" build -o "$raw" -target=wasip1 -buildmode=wasi-legacy -scheduler=none -no-debug .)
		;;
	go-wasip1 | go-wasi)
		modfile="$(noproto_modfile "$dir")" || { rm -f "$out"; return 1; }
		cmd=(env GOOS=wasip1 GOARCH=wasm "$GO" build)
		[[ -n "$modfile" ]] && cmd+=("-modfile=$modfile")
		[[ "$kind" == go-wasip1 ]] && cmd+=(-buildmode=c-shared)
		cmd+=(-trimpath -ldflags=-s -o "$raw" .)
		;;
	opa-wasm)
		local entrypoint
		entrypoint="$(tr -d '[:space:]' <"$dir/entrypoint" 2>/dev/null || true)"
		if [[ -z "$entrypoint" ]]; then
			printf 'build-policies: FAILED %s: build kind opa-wasm needs the entrypoint (e.g. policy/main) in %s/entrypoint\n' \
				"$dir" "$dir" >&2
			rm -f "$out"
			return 1
		fi
		cmd=(bash -c 'set -euo pipefail
			shopt -s nullglob
			files=(*.rego utility/*.rego)
			src=()
			for f in "${files[@]}"; do [[ "$f" == *_test.rego ]] || src+=("$f"); done
			"$1" build -t wasm -e "$2" -o bundle.tar.gz "${src[@]}"
			trap "rm -f bundle.tar.gz" EXIT
			tar -xzf bundle.tar.gz -O /policy.wasm >"$3"' opa-wasm "$OPA_BIN" "$entrypoint" "$raw")
		;;
	*)
		printf 'build-policies: FAILED %s: unknown build kind %q in %s/policy.build (want tinygo-wasi, tinygo-wasi-legacy, go-wasip1, go-wasi or opa-wasm)\n' \
			"$dir" "$kind" "$dir" >&2
		rm -f "$out"
		return 1
		;;
	esac
	if ((FORCE == 0)) && newer_than_sources "$dir" "$dir/$raw" code; then
		: # compiled already (e.g. before tollgate annotate existed): only annotate
	elif ! (cd "$dir" && rm -f "$raw" && "${cmd[@]}") >"$out" 2>&1; then
		printf 'build-policies: FAILED %s (%s): %s\n' "$dir" "$kind" "${cmd[*]}" >&2
		sed 's/^/    /' "$out" >&2
		rm -f "$out" "$dir/$raw"
		[[ -z "$modfile" ]] || rm -rf "${modfile%/*}"
		return 1
	fi
	rm -f "$out"
	[[ -z "$modfile" ]] || rm -rf "${modfile%/*}"
	local how
	how="$(annotate_one "$dir" "$raw" policy.wasm)" || return 1
	elapsed="$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
	printf 'build-policies: %-45s %-18s %6s s %8s KB (%s)\n' "$dir" "$kind" "$elapsed" \
		"$(($(stat -c %s "$dir/policy.wasm") / 1024))" "$how" >&2
	if [[ -f "$dir/wasm-opt.args" ]]; then
		build_optimized "$dir" "$kind" || return 1
	fi
}

# annotate_one writes dir/final from dir/raw: annotated when the directory has metadata.yml and
# there is a tollgate to annotate with, copied otherwise. It prints "annotated" or "copied".
annotate_one() {
	local dir="$1" raw="$2" final="$3" out
	out="$(mktemp)"
	if [[ -n "$TOLLGATE_BIN" && -f "$dir/metadata.yml" ]]; then
		local -a annotate=("$TOLLGATE_BIN" annotate -m metadata.yml)
		[[ -f "$dir/README.md" ]] && annotate+=(-u README.md)
		annotate+=(-o "$final.tmp" "$raw")
		if ! (cd "$dir" && "${annotate[@]}") >"$out" 2>&1; then
			printf 'build-policies: FAILED %s: %s\n' "$dir" "${annotate[*]}" >&2
			sed 's/^/    /' "$out" >&2
			rm -f "$out" "$dir/$final.tmp"
			return 1
		fi
		printf 'annotated\n'
	else
		cp "$dir/$raw" "$dir/$final.tmp"
		printf 'copied\n'
	fi
	mv -f "$dir/$final.tmp" "$dir/$final"
	rm -f "$out"
}

# build_optimized builds dir the way Kubewarden's CI does (see the header): policy.opt.raw.wasm
# through wasm-opt with the flags of wasm-opt.args, then policy.opt.wasm.
build_optimized() {
	local dir="$1" kind="$2" start="$EPOCHREALTIME" out
	local -a flags compile=()
	read -r -a flags <"$dir/wasm-opt.args"
	((${#flags[@]} > 0)) || { printf 'build-policies: FAILED %s: %s/wasm-opt.args is empty (want wasm-opt flags, e.g. --all-features -Oz)\n' "$dir" "$dir" >&2; return 1; }
	local input=policy.raw.wasm
	case "$kind" in
	go-wasi)
		compile=(env GOOS=wasip1 GOARCH=wasm "$GO" build "-gcflags=all=-B " "-ldflags=-w -s" -o policy.opt.go.wasm .)
		input=policy.opt.go.wasm
		;;
	go-wasip1)
		compile=(env GOOS=wasip1 GOARCH=wasm "$GO" build -buildmode=c-shared "-gcflags=all=-B " "-ldflags=-w -s" -o policy.opt.go.wasm .)
		input=policy.opt.go.wasm
		;;
	esac
	out="$(mktemp)"
	if ! (cd "$dir" && rm -f policy.opt.raw.wasm &&
		{ ((${#compile[@]} == 0)) || "${compile[@]}"; } &&
		"$WASM_OPT_BIN" "${flags[@]}" -o policy.opt.raw.wasm "$input") >"$out" 2>&1; then
		printf 'build-policies: FAILED %s (%s, wasm-opt): %s %s -o policy.opt.raw.wasm %s\n' "$dir" "$kind" \
			"${compile[*]:+${compile[*]} && }$WASM_OPT_BIN" "${flags[*]}" "$input" >&2
		sed 's/^/    /' "$out" >&2
		rm -f "$out" "$dir/policy.opt.raw.wasm" "$dir/policy.opt.go.wasm"
		return 1
	fi
	rm -f "$out" "$dir/policy.opt.go.wasm"
	local how
	how="$(annotate_one "$dir" policy.opt.raw.wasm policy.opt.wasm)" || return 1
	printf 'build-policies: %-45s %-18s %6s s %8s KB (%s)\n' "$dir" "wasm-opt ${flags[*]}" \
		"$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')" \
		"$(($(stat -c %s "$dir/policy.opt.wasm") / 1024))" "$how" >&2
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

# check_tinygo makes sure TinyGo and its seeded libraries are there (tinygo clean removes them).
check_tinygo() {
	if [[ ! -x "$TINYGO" ]]; then
		die "TinyGo not found at $TINYGO: run \`make tools\` (or scripts/install-tools.sh), or set TINYGO"
	fi
	local cache
	cache="$("$TINYGO" env GOCACHE)"
	if [[ ! -f "$cache/wasi-libc-wasm32-unknown-wasi-generic/lib.a" ||
		! -f "$cache/compiler-rt-wasm32-unknown-wasi-generic/lib.a" ]]; then
		"$ROOT/scripts/install-tools.sh" >/dev/null
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

	find_tollgate
	local -a todo=()
	local dir need_tinygo=0 need_opa=0 need_wasm_opt=0 skipped=0
	for dir in "${dirs[@]}"; do
		if ((FORCE == 0)) && up_to_date "$dir"; then
			skipped=$((skipped + 1))
			continue
		fi
		todo+=("$dir")
		grep -q tinygo "$dir/policy.build" && need_tinygo=1
		grep -q opa-wasm "$dir/policy.build" && need_opa=1
		[[ -f "$dir/wasm-opt.args" ]] && need_wasm_opt=1
	done
	if ((${#todo[@]} == 0)); then
		log "all ${#dirs[@]} policies up to date"
		return 0
	fi
	((need_tinygo == 0)) || check_tinygo
	if ((need_opa == 1)); then
		OPA_BIN="$(find_tool OPA install-opa.sh)" || exit 1
	fi
	if ((need_wasm_opt == 1)); then
		WASM_OPT_BIN="$(find_tool WASM_OPT install-binaryen.sh)" || exit 1
	fi
	build_tollgate
	[[ -n "$TOLLGATE_BIN" ]] || log "no tollgate annotate command yet: policy.wasm files are not annotated"
	log "building ${#todo[@]} policies, $JOBS at a time ($skipped up to date)"

	local status
	status="$(mktemp -d)"
	# shellcheck disable=SC2064
	trap "rm -rf '$status'" EXIT
	local i=0 start="$EPOCHREALTIME"
	for dir in "${todo[@]}"; do
		while (($(jobs -rp | wc -l) >= JOBS)); do
			wait -n || true
		done
		(build_one "$dir" || touch "$status/fail.$i") &
		i=$((i + 1))
	done
	wait
	local failed=()
	for ((i = 0; i < ${#todo[@]}; i++)); do
		[[ -e "$status/fail.$i" ]] && failed+=("${todo[$i]}")
	done
	if ((${#failed[@]} > 0)); then
		die "${#failed[@]} of ${#todo[@]} policies failed to build: ${failed[*]}"
	fi
	log "built ${#todo[@]} policies in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
}

main "$@"
