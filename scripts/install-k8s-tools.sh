#!/usr/bin/env bash
# install-k8s-tools.sh builds the Kubernetes tools the operator's end-to-end tests need, from the Go
# module proxy (no release downloads, no envtest): kube-apiserver and kubectl, the node's kubelet,
# kube-controller-manager, kube-scheduler and kube-proxy, etcd, controller-gen and helm. Each is pinned and built into a cache keyed by version OUTSIDE the repository, shared by
# every clone on the machine:
#   ${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}/<name>-<version>/bin/<name>
#
# Usage: install-k8s-tools.sh [tool...]   tools: kube-apiserver kubectl kubelet kube-controller-manager
#                                         kube-scheduler kube-proxy etcd controller-gen helm
#                                         (default: all of them)
# Prints one `name=path` line on stdout per selected tool (built now or found in the cache), so
# Makefiles and tests can use them; everything else goes to stderr.
#
# Idempotent: a second run only checks that the binaries exist and were built by this recipe (no
# network, well under a second).
# Every tool is built in a temporary directory and renamed into place, so an interrupted run never
# leaves a half-built tool behind. Builds run one after another (kube-apiserver alone takes several
# GB of memory and about 10 minutes on 2 cores; all tools cold about 14 minutes).
#
# `go install module@version` is not used: the proxy refuses some modules' version lists (403),
# which go install reads. Each tool is built through a small wrapper module that requires it.
#
# Environment:
#   TOLLGATE_TOOLS_DIR        where tools are cached (see above)
#   KUBERNETES_VERSION        default 1.36.3 (the kube-* binaries, kubectl, kubelet; staging modules
#                             v0.MINOR.PATCH)
#   ETCD_VERSION              default 3.6.16
#   CONTROLLER_TOOLS_VERSION  default 0.23.0 (controller-gen)
#   HELM_VERSION              default 3.21.4
#   GO                        the go command (default: go)
set -euo pipefail

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CONTROLLER_TOOLS_VERSION="${CONTROLLER_TOOLS_VERSION:-0.23.0}"
HELM_VERSION="${HELM_VERSION:-3.21.4}"

# HOME may be unset in a stripped CI environment: fall back to the account's home directory.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
GO="${GO:-go}"
KUBE_TOOLS=(kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler kube-proxy)
ALL_TOOLS=("${KUBE_TOOLS[@]}" etcd controller-gen helm)
# RECIPE is written next to each tool's bin/ and must match for a cached tool to be used: bump it
# when the way tools are built changes, so caches made the old way are rebuilt.
# 2: versions stamped by -ldflags -X (kube-apiserver reported v0.0.0-master, helm v3.21).
# (3 would rebuild every cached kube-apiserver: the node binaries were added under 2, each checked
# on its own.)
RECIPE=2

log() { printf 'install-k8s-tools: %s\n' "$*" >&2; }
die() { printf 'install-k8s-tools: error: %s\n' "$*" >&2; exit 1; }

tool_version() {
	case "$1" in
	kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler | kube-proxy) echo "$KUBERNETES_VERSION" ;;
	etcd) echo "$ETCD_VERSION" ;;
	controller-gen) echo "$CONTROLLER_TOOLS_VERSION" ;;
	helm) echo "$HELM_VERSION" ;;
	*) die "unknown tool $1 (known: ${ALL_TOOLS[*]})" ;;
	esac
}

tool_bin() { echo "$TOOLS_DIR/$1-$(tool_version "$1")/bin/$1"; }

tool_ok() {
	local bin
	bin="$(tool_bin "$1")"
	[[ -x "$bin" && "$(cat "${bin%/bin/*}/recipe" 2>/dev/null)" == "$RECIPE" ]]
}

# go_build WRAPPER_GOMOD_EXTRA LDFLAGS OUTDIR REQUIRE_MODULE@VERSION PACKAGE... builds PACKAGEs into
# OUTDIR through a wrapper module in a temporary directory that requires the module (plus the extra
# go.mod lines given, e.g. replace directives), linked with `-s -w LDFLAGS`.
go_build() {
	local extra="$1" ldflags="$2" out="$3" req="$4"
	shift 4
	local wrap="$TMP/wrapper"
	rm -rf "$wrap"
	mkdir -p "$wrap"
	{
		printf 'module tollgate.local/k8s-tools-wrapper\n\ngo 1.26\n\nrequire %s %s\n' "${req%@*}" "${req#*@}"
		printf '%s\n' "$extra"
	} >"$wrap/go.mod"
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		local p
		for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
		printf ')\n'
	} >"$wrap/tools.go"
	(
		cd "$wrap"
		export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
		"$GO" mod tidy >&2 || die "go mod tidy of the wrapper for $req failed"
		"$GO" build -trimpath -ldflags="-s -w $ldflags" -o "$out/" "$@" >&2
	) || die "building $* ($req) failed"
}

# install_bin NAME SRC moves the freshly built binary SRC to NAME's place in the cache (via a
# temporary directory renamed into place).
install_bin() {
	local name="$1" src="$2" bin root
	bin="$(tool_bin "$name")"
	root="${bin%/bin/*}"
	[[ -x "$src" ]] || die "$src was not built"
	mkdir -p "$TMP/$name/bin"
	mv "$src" "$TMP/$name/bin/$name"
	echo "$RECIPE" >"$TMP/$name/recipe"
	rm -rf "$root"
	if ! mv -T "$TMP/$name" "$root" 2>/dev/null; then
		# Another run (another clone) finished first; keep its result.
		tool_ok "$name" || die "cannot move $name into $root"
	fi
}

# module_gomod MODULE@VERSION downloads a module's go.mod and prints its path in the module cache.
module_gomod() {
	local gomod
	gomod="$(cd "$TMP" && GOTOOLCHAIN=local "$GO" mod download -json "$1" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
	[[ -f "$gomod" ]] || die "cannot download the go.mod of $1"
	echo "$gomod"
}

# kube_replaces prints a replace directive pinning every staging module that k8s.io/kubernetes
# requires to the published v0.MINOR.PATCH: its own `replace k8s.io/x => ./staging/...` directives
# do not apply to a module that depends on it. The list is read from its real go.mod.
kube_replaces() {
	local gomod staging="v0.${KUBERNETES_VERSION#*.}"
	gomod="$(module_gomod "k8s.io/kubernetes@v$KUBERNETES_VERSION")" || exit 1
	local mods m
	# Required at v0.0.0 (so never a published version) and replaced by a staging directory.
	mods="$(awk '$2 == "v0.0.0" && $1 ~ /^k8s\.io\// { print $1 }' "$gomod" | sort -u)"
	[[ -n "$mods" ]] || die "no staging modules found in $gomod"
	printf 'replace (\n'
	for m in $mods; do
		grep -q "^[[:space:]]*$m => ./staging/" "$gomod" || die "$m required at v0.0.0 but not a staging replace in $gomod"
		printf '\t%s => %s %s\n' "$m" "$m" "$staging"
	done
	printf ')\n'
}

build_kube() {
	# One `go build` of every Kubernetes binary: they share most packages, so building them together
	# costs little more than kube-apiserver alone (kubelet and friends add about 2-4 minutes).
	log "building ${KUBE_TOOLS[*]} v$KUBERNETES_VERSION (SLOW: about 10-14 minutes on 2 cores, several GB of memory)"
	local replaces
	replaces="$(kube_replaces)" || exit 1
	# What Kubernetes' hack/lib/version.sh stamps (/version, kubectl version; helm charts'
	# kubeVersion constraints fail against the default v0.0.0-master; the kubelet reports it as the
	# node's kubeletVersion).
	local ldflags="" pkg key minor="${KUBERNETES_VERSION#*.}"
	minor="${minor%%.*}"
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		for key in gitVersion=v$KUBERNETES_VERSION gitMajor=${KUBERNETES_VERSION%%.*} gitMinor=$minor gitTreeState=clean; do
			ldflags+=" -X $pkg.$key"
		done
	done
	local pkgs=() t
	for t in "${KUBE_TOOLS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
	go_build "$replaces" "$ldflags" "$TMP/out" "k8s.io/kubernetes@v$KUBERNETES_VERSION" "${pkgs[@]}"
	for t in "${KUBE_TOOLS[@]}"; do install_bin "$t" "$TMP/out/$t"; done
}

build_one() {
	local name="$1"
	case "$name" in
	kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler | kube-proxy) build_kube ;;
	etcd)
		log "building etcd v$ETCD_VERSION (about a minute)"
		go_build "" "" "$TMP/out" "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" go.etcd.io/etcd/server/v3
		# go build names the binary of the module root package after the path without /v3: server.
		local b
		for b in server v3 etcd; do [[ -x "$TMP/out/$b" ]] && break; done
		install_bin etcd "$TMP/out/$b"
		;;
	controller-gen)
		log "building controller-gen v$CONTROLLER_TOOLS_VERSION (about a minute)"
		# The version goes into generated CRDs (controller-gen.kubebuilder.io/version).
		go_build "" "-X sigs.k8s.io/controller-tools/pkg/version.version=v$CONTROLLER_TOOLS_VERSION" \
			"$TMP/out" "sigs.k8s.io/controller-tools@v$CONTROLLER_TOOLS_VERSION" \
			sigs.k8s.io/controller-tools/cmd/controller-gen
		install_bin controller-gen "$TMP/out/controller-gen"
		;;
	helm)
		log "building helm v$HELM_VERSION (about two minutes)"
		# As helm's Makefile: its version, and the Kubernetes version of the client-go it uses as
		# the default .Capabilities.KubeVersion (without it `helm template` assumes v1.20).
		local gomod cg
		gomod="$(module_gomod "helm.sh/helm/v3@v$HELM_VERSION")" || exit 1
		cg="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")" # v0.MINOR.PATCH
		[[ "$cg" =~ ^v0\.([0-9]+)\. ]] || die "no k8s.io/client-go version in $gomod"
		go_build "" "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean
			-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${BASH_REMATCH[1]}
			-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${BASH_REMATCH[1]}" \
			"$TMP/out" "helm.sh/helm/v3@v$HELM_VERSION" helm.sh/helm/v3/cmd/helm
		install_bin helm "$TMP/out/helm"
		;;
	esac
}

main() {
	local tools=("$@") t
	((${#tools[@]})) || tools=("${ALL_TOOLS[@]}")
	for t in "${tools[@]}"; do tool_version "$t" >/dev/null; done
	for t in "${tools[@]}"; do
		if ! tool_ok "$t"; then
			command -v "$GO" >/dev/null || die "go not found (set GO=/path/to/go)"
			mkdir -p "$TOOLS_DIR"
			# Leftovers of runs that were killed (SIGKILL skips the cleanup trap); two hours is far
			# longer than a build, so a concurrent run's directory is never removed.
			find "$TOOLS_DIR" -maxdepth 1 -name ".k8s-tools-*" -type d -mmin +120 -exec chmod -R u+w {} + -exec rm -rf {} + 2>/dev/null || true
			TMP="$(mktemp -d "$TOOLS_DIR/.k8s-tools-$t.XXXXXX")"
			# Go's module cache is read-only; keep the temporary directory deletable.
			# shellcheck disable=SC2064 # expand now
			trap "chmod -R u+w '$TMP' 2>/dev/null; rm -rf '$TMP'" EXIT
			local start=$SECONDS
			build_one "$t"
			log "$t $(tool_version "$t") built in $((SECONDS - start)) s"
			chmod -R u+w "$TMP" 2>/dev/null || true
			rm -rf "$TMP"
			trap - EXIT
		fi
		printf '%s=%s\n' "$t" "$(tool_bin "$t")"
	done
}

main "$@"
