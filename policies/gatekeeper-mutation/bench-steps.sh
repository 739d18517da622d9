#!/usr/bin/env bash
# bench-steps.sh measures where an evaluation of the module goes, step by step: wazero has no
# profiler, so it builds probe copies of the module that answer early, after one step each, and
# runs `tollgate bench` on them and on the full module, interleaved, on the 5 KB Pod with the five
# bench mutators (docs/benchmarks.md, "Gatekeeper mutation module"):
#   empty     the guest answers at once (the host's part: encode the request, call, decode)
#   read      + read the ValidationRequest, check the object, read its top level, find the settings
#   loop      + the convergence loop (matching, the five mutators), no encoding
#   encode    + encode the mutated object, but answer without it
#   full      + the answer with the mutated object, which the host decodes and diffs
# A step's cost is the difference between its probe and the one before (compare the minimums:
# they move least with the load).
#
# Usage: policies/gatekeeper-mutation/bench-steps.sh [ROUNDS] [COUNT]   (defaults 3 and 3000)
# Environment: TOLLGATE (default bin/tollgate), TINYGO (default: scripts/install-tools.sh's).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${1:-3}" COUNT="${2:-3000}"
TOLLGATE="${TOLLGATE:-$ROOT/bin/tollgate}"
TOOLS_DIR="${TOLLGATE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/tools}"
TINYGO="${TINYGO:-$TOOLS_DIR/tinygo-0.41.1/bin/tinygo}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# probe NAME FILE OLD NEW: a copy of the module (and the sdk it replaces) with OLD replaced by NEW
# in FILE, built into $WORK/NAME.wasm.
probe() {
	local name="$1" file="$2" old="$3" new="$4" dir="$WORK/$1/policies/gatekeeper-mutation"
	mkdir -p "$WORK/$name/policies"
	cp -r "$ROOT/sdk" "$WORK/$name/sdk"
	cp -r "$ROOT/policies/gatekeeper-mutation" "$dir"
	if [[ -n "$file" ]]; then
		OLD="$old" NEW="$new" perl -0pi -e 'BEGIN { $n = 0 } $n += s/\Q$ENV{OLD}\E/$ENV{NEW}/; END { exit($n == 1 ? 0 : 1) }' "$dir/$file" ||
			{ echo "bench-steps: the probe $name no longer applies to $file: update this script" >&2; exit 1; }
	fi
	(cd "$dir" && "$TINYGO" build -o "$WORK/$name.wasm" -target=wasip1 -buildmode=wasi-legacy -scheduler=none -no-debug . 2>&1 |
		grep -v 'is not a recognized feature' || true)
	[[ -f "$WORK/$name.wasm" ]]
}

answer='return []byte(`{"accepted":true}`), nil'
probe empty guest.go $'func validate(payload []byte) ([]byte, error) {\n' \
	$'func validate(payload []byte) ([]byte, error) {\n\tif len(payload) > 0 {\n\t\t'"$answer"$'\n\t}\n'
probe read guest.go $'\tif sys.FromCluster() {' $'\tif len(r.Object) > 0 {\n\t\t'"$answer"$'\n\t}\n\tif sys.FromCluster() {'
probe loop engine/engine.go $'\tif req.Out == nil {\n\t\treq.Out = make' \
	$'\tif len(req.Object) > 0 {\n\t\treturn nil, false, nil\n\t}\n\tif req.Out == nil {\n\t\treq.Out = make'
probe encode guest.go $'\tanswer = append(mutated, \'}\')\n\treturn answer, nil' \
	$'\tanswer = append(mutated, \'}\')\n\tif len(answer) > 0 {\n\t\t'"$answer"$'\n\t}\n\treturn answer, nil'
probe full "" "" ""

cd "$ROOT"
for ((r = 1; r <= ROUNDS; r++)); do
	for p in empty read loop encode full; do
		out="$("$TOLLGATE" bench "$WORK/$p.wasm" -r test/testdata/reviews/pod.json \
			-s policies/gatekeeper-mutation/testdata/settings-bench.yaml --count "$COUNT" 2>&1)"
		printf '%-7s %s load %s  p50 %-12s min %s\n' "$p" "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1 /proc/loadavg)" \
			"$(awk '/^p50/{print $2}' <<<"$out")" "$(awk '/^min/{print $4}' <<<"$out")"
	done
done
