#!/usr/bin/env bash
# under-load.sh [-n N] COMMAND [ARG...]: runs COMMAND with N CPU-bound processes beside it (default
# 2, as many as the 2-core machines we test on have cores), then stops them and exits with COMMAND's
# status. It is how the project shows that tests with a wall-clock ceiling or an instant sample do
# not race the clock on a loaded machine (issue 35): `make test-under-load` runs the root module's
# tests this way. The load average is printed before, every minute during, and after the run.
set -uo pipefail
n=2
if [[ "${1:-}" == "-n" ]]; then n="${2:?-n needs a number}"; shift 2; fi
[[ "$n" =~ ^[0-9]+$ ]] || { echo "under-load: -n wants a number of processes, got \"$n\"" >&2; exit 2; }
(( $# > 0 )) || { echo "usage: under-load.sh [-n N] COMMAND [ARG...]" >&2; exit 2; }

burners=()
sampler=""
stop() {
	[[ -n "$sampler" ]] && { pkill -P "$sampler"; kill "$sampler"; } 2>/dev/null
	sampler=""
	if ((${#burners[@]})); then
		kill "${burners[@]}" 2>/dev/null
		wait "${burners[@]}" 2>/dev/null
	fi
	burners=()
}
trap stop EXIT
trap 'stop; exit 130' INT TERM
for ((i = 0; i < n; i++)); do
	# A pure CPU loop in its own bash: no I/O, no memory, the kind of neighbour a shared CI
	# machine has.
	bash -c 'while :; do :; done' &
	burners+=("$!")
done
export UNDER_LOAD_PIDS="${burners[*]}" # for the command (test/scripts checks them)
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "under-load: $n CPU-bound processes started beside: $*; load average $(load)"
(while sleep 60; do echo "under-load: load average $(load)"; done) &
sampler=$!
start=$SECONDS
"$@"
rc=$?
stop
echo "under-load: exit $rc after $((SECONDS - start)) s with $n CPU-bound processes beside; load average $(load)"
exit "$rc"
