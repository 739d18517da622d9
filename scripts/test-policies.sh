#!/usr/bin/env bash
# test-policies.sh runs the native Go unit tests (`go test ./...`) of every policy module: each
# directory below examples/, policies/ and test/testdata/policies/ with a policy.build and a
# go.mod. The root module's `go test ./...` does not reach them (they are modules of their own).
# A policy module's tests must build natively (policy-sdk-go and wapc-guest-tinygo stub the waPC
# imports outside Wasm).
#
# Usage: scripts/test-policies.sh [DIR...]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"

dirs=("$@")
if ((${#dirs[@]} == 0)); then
	existing=()
	for d in examples policies test/testdata/policies; do
		[[ -d "$d" ]] && existing+=("$d")
	done
	((${#existing[@]} > 0)) || exit 0
	mapfile -t dirs < <(find "${existing[@]}" -name policy.build -type f -printf '%h\n' | sort)
fi

failed=()
for dir in "${dirs[@]}"; do
	[[ -f "$dir/go.mod" ]] || continue
	if ! (cd "$dir" && "$GO" test ./...); then
		failed+=("$dir")
	fi
done
if ((${#failed[@]} > 0)); then
	printf 'test-policies: FAILED in %s\n' "${failed[*]}" >&2
	exit 1
fi
