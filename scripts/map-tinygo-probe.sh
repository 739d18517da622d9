#!/usr/bin/env bash
# map-tinygo-probe.sh tries the TinyGo build of policies/mutating-admission-policy and runs the
# result on the documented sidecar example, to tell whether the module could move from standard
# Go to TinyGo (smaller, faster to load). Exit 0 only if both the build and the run succeed and
# the run mutates the Pod. See RATIONALE.md ("Why is the MAP module built with standard Go?").
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TINYGO_VERSION="${TINYGO_VERSION:-0.41.1}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
TINYGO="${TINYGO:-$TOOLS_DIR/tinygo-$TINYGO_VERSION/bin/tinygo}"
DIR=policies/mutating-admission-policy
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

[[ -x "$TINYGO" ]] || { echo "map-tinygo-probe: no TinyGo at $TINYGO (run make tools)" >&2; exit 2; }
echo "map-tinygo-probe: building $DIR with $("$TINYGO" version)" >&2
start=$(date +%s)
if ! (cd "$DIR" && "$TINYGO" build -target=wasip1 -buildmode=wasi-legacy -scheduler=none -no-debug -o "$OUT/policy.wasm" .) >"$OUT/build.log" 2>&1; then
	echo "map-tinygo-probe: RESULT: the TinyGo build fails ($(($(date +%s) - start)) s):" >&2
	grep -v 'not a recognized feature' "$OUT/build.log" | head -20 >&2
	exit 1
fi
echo "map-tinygo-probe: built $(stat -c %s "$OUT/policy.wasm") bytes in $(($(date +%s) - start)) s" >&2
[[ -x bin/tollgate ]] || CGO_ENABLED=0 go build -trimpath -o bin/tollgate ./cmd/tollgate
if ! bin/tollgate run "$OUT/policy.wasm" -r "$DIR/testdata/pod.json" -s "$DIR/testdata/sidecar-settings.yml" --timeout 30s >"$OUT/run.json" 2>"$OUT/run.log"; then
	echo "map-tinygo-probe: RESULT: the TinyGo module builds but does not run:" >&2
	head -20 "$OUT/run.log" >&2
	exit 1
fi
if ! grep -q '"patch"' "$OUT/run.json"; then
	echo "map-tinygo-probe: RESULT: the TinyGo module runs but does not mutate the Pod: $(cat "$OUT/run.json")" >&2
	exit 1
fi
echo "map-tinygo-probe: RESULT: the TinyGo module builds and runs the sidecar example: $(cat "$OUT/run.json")" >&2
