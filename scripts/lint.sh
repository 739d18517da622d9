#!/usr/bin/env bash
# lint.sh checks what a reviewer checks, in every Go module of the repository: gofmt (no file
# needs formatting), go vet (no finding) and `go mod tidy -diff` (go.mod and go.sum are tidy).
# It runs every check on every module and then fails naming each module and check at fault, so
# one run shows all of them. `make lint` runs it, and `make test` runs `make lint`.
#
# Usage: scripts/lint.sh [MODULE_DIR...]
#   MODULE_DIR  module directories relative to the repository root (default: every directory of the
#               repository holding a go.mod)
# Environment:
#   GO          the go command (default: go)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
GO="${GO:-go}"

modules=("$@")
if ((${#modules[@]} == 0)); then
	mapfile -t modules < <(find . -name .git -prune -o -name go.mod -type f -printf '%h\n' | sed 's#^\./##' | sort)
fi

failed=()
note() { failed+=("$1"); printf 'lint: FAILED %s\n' "$1" >&2; }

for m in "${modules[@]}"; do
	m="${m%/}"
	[[ -f "$m/go.mod" ]] || { note "$m: no go.mod"; continue; }
	# gofmt: the module's own files; a nested module is checked as a module of its own.
	nested=()
	while IFS= read -r d; do nested+=(-path "$d" -prune -o); done < <(find "$m" -mindepth 2 -name go.mod -printf '%h\n')
	unformatted="$(find "$m" -name .git -prune -o "${nested[@]}" -name '*.go' -type f -print0 | xargs -0 -r gofmt -l)"
	if [[ -n "$unformatted" ]]; then
		note "$m: gofmt: these files need formatting (gofmt -w):"
		sed 's#^#    #' <<<"$unformatted" >&2
	fi
	if ! out="$(cd "$m" && "$GO" vet ./... 2>&1)"; then
		note "$m: go vet:"
		sed 's/^/    /' <<<"$out" >&2
	fi
	if ! out="$(cd "$m" && "$GO" mod tidy -diff 2>&1)"; then
		note "$m: go mod tidy -diff (run go mod tidy in $m):"
		sed 's/^/    /' <<<"$out" >&2
	fi
done

if ((${#failed[@]} > 0)); then
	printf 'lint: %d problem(s), %d modules checked:\n' "${#failed[@]}" "${#modules[@]}" >&2
	printf '    %s\n' "${failed[@]%%:*}" | sort -u >&2
	exit 1
fi
printf 'lint: gofmt, go vet and go mod tidy -diff clean in %d modules\n' "${#modules[@]}" >&2
