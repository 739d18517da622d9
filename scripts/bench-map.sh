#!/usr/bin/env bash
# bench-map.sh measures the MutatingAdmissionPolicy module's per-evaluation speed on
# test/testdata/reviews' 5 KB Pod (issue 31's acceptance: `tollgate bench` p50 of the label apply
# configuration, and the Wasm/native ratio against Kubernetes' plugin in the same run), printing the
# load average and the time with every figure (docs/benchmarks/mutating-admission-policy.md).
#
# Usage: scripts/bench-map.sh [MODULE]
#   MODULE  the module to measure (default: builtin://mutating-admission-policy as `make policies`
#           builds it, policies/mutating-admission-policy/policy.wasm, the TinyGo build since the
#           switch; brought up to date first by scripts/build-policies.sh, from its cache when the
#           sources did not change, else a TinyGo build of about 230 CPU-s)
# Environment:
#   ROUNDS  rounds of each measurement, interleaved (default 3)
#   COUNT   evaluations per `tollgate bench` round (default 1000)
#   GO      the go command (default: go)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
ROUNDS="${ROUNDS:-3}"
COUNT="${COUNT:-1000}"
T=policies/mutating-admission-policy/testdata
MODULE="${1:-}"

log() { printf '%s %s | load %s\n' "$(date -u +%H:%M:%S)" "$*" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

if [[ -z "$MODULE" ]]; then
	log "bringing the built-in up to date (scripts/build-policies.sh policies/mutating-admission-policy)"
	./scripts/build-policies.sh --no-wasm-opt policies/mutating-admission-policy
	MODULE=policies/mutating-admission-policy/policy.wasm
fi
[[ -f "$MODULE" ]] || { echo "bench-map: no module $MODULE" >&2; exit 1; }
MODULE="$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE")"
log "module $MODULE ($(stat -c %s "$MODULE") bytes)"
mkdir -p bin
CGO_ENABLED=0 "$GO" build -trimpath -o bin/tollgate ./cmd/tollgate

for ((r = 1; r <= ROUNDS; r++)); do
	for s in label-settings.yml sidecar-any-pod-settings.yml; do
		out="$(bin/tollgate bench "$MODULE" -r test/testdata/reviews/pod.json -s "$T/$s" --count "$COUNT" -o json)"
		log "round $r tollgate bench ${s%-settings.yml}: $(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%s %.2f ms" % (k[:-3], d[k]/1e6) for k in ["p50_ns","p95_ns","p99_ns","min_ns","mean_ns"]))')"
	done
	# BenchmarkMAPEvaluate: the same request through the module and through Kubernetes' plugin
	# natively, interleaved, in one run (the ratio of the p50s is the acceptance's Wasm/native).
	(cd test/mapdiff && TOLLGATE_MAP_MODULE="$MODULE" "$GO" test -run '^$' \
		-bench 'MAPEvaluate$/(label-apply|sidecar-any)-pod5k' -benchtime "${COUNT}x" -count 1 .) |
		awk -v when="$(date -u +%H:%M:%S)" '/p50-us/ { for (i = 1; i <= NF; i++) if ($i == "p50-us") p50[$1] = $(i-1) }
			END { for (k in p50) printf "%s round mapdiff %s p50 %s us\n", when, k, p50[k];
			      for (k in p50) if (k ~ /\/wasm/) { n = k; sub(/\/wasm/, "/native", n); if (p50[n] > 0) printf "%s round mapdiff %s Wasm/native %.2fx\n", when, k, p50[k] / p50[n] } }' | sort
	log "round $r done"
done
