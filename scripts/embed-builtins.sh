#!/usr/bin/env bash
# embed-builtins.sh copies the built built-in policies into host/builtin/modules/ so that
# `go build ./cmd/tollgate` embeds them (builtin://NAME). Run after scripts/build-policies.sh;
# `make policies` does. A module is copied only when it changed. Next to each module it writes
# NAME.wasm.sha256, "sha256:<hex> <size>", the digest host/builtin.Digest gives without hashing
# the module at every start (rewritten whenever it is missing or older than the module).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
for name in mutating-admission-policy gatekeeper-mutation; do
	src="policies/$name/policy.wasm"
	dst="host/builtin/modules/$name.wasm"
	if [[ ! -f "$src" ]]; then
		echo "embed-builtins: $src is not built (run scripts/build-policies.sh)" >&2
		exit 1
	fi
	if ! cmp -s "$src" "$dst" 2>/dev/null; then
		cp "$src" "$dst.tmp" && mv "$dst.tmp" "$dst"
		echo "embed-builtins: $dst updated" >&2
	fi
	sum="$dst.sha256"
	if [[ ! -f "$sum" || "$dst" -nt "$sum" ]]; then
		printf 'sha256:%s %s\n' "$(sha256sum "$dst" | cut -d' ' -f1)" "$(stat -c %s "$dst")" >"$sum.tmp" && mv "$sum.tmp" "$sum"
		echo "embed-builtins: $sum updated" >&2
	fi
done
