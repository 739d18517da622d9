#!/usr/bin/env bash
# demo.sh runs each example policy through `tollgate run` on its sample requests and prints the
# AdmissionResponses, so a new user sees tollgate work right after `make demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TG=${TOLLGATE:-bin/tollgate}

show() {
	local title=$1
	shift
	printf '\n\033[1m%s\033[0m\n$ %s\n' "$title" "$*"
	"$@" || true
}

show "capabilities-drop (mutating, TinyGo): a Pod adding capabilities gets drop: [BPF]" \
	"$TG" run examples/capabilities-drop/policy.wasm -r examples/capabilities-drop/testdata/pod-adds-capabilities.json -o yaml
show "required-labels (validating with settings, TinyGo): a Pod without its mandatory label is rejected" \
	"$TG" run examples/required-labels/policy.wasm -r examples/required-labels/testdata/pod-missing-label.json -s examples/required-labels/testdata/settings.json
show "required-labels: a compliant Deployment is accepted" \
	"$TG" run examples/required-labels/policy.wasm -r examples/required-labels/testdata/deployment-compliant.json -s examples/required-labels/testdata/settings.json
for f in examples/raw-validation/testdata/*request*.json; do
	[[ -e $f ]] || continue
	show "raw-validation (raw policy, TinyGo wasi-legacy): $(basename "$f")" \
		"$TG" run examples/raw-validation/policy.wasm --raw -r "$f" -s examples/raw-validation/testdata/settings.json
done
# The MutatingAdmissionPolicy built-in (the TinyGo CEL engine embedded in the binary): a Kubernetes
# MutatingAdmissionPolicy object, as `kubectl apply` would take it, adds a label with an apply
# configuration; the patch is printed decoded too.
M=policies/mutating-admission-policy/testdata
printf '\n\033[1m%s\033[0m\n$ %s\n' "mutating-admission-policy (built-in, TinyGo CEL engine): a Kubernetes MutatingAdmissionPolicy labels a Pod" \
	"$TG run builtin://mutating-admission-policy -r $M/pod.json -s $M/label-settings.yml"
if out=$("$TG" run builtin://mutating-admission-policy -r "$M/pod.json" -s "$M/label-settings.yml"); then
	printf '%s\n' "$out"
	patch=$(sed -n 's/.*"patch":"\([^"]*\)".*/\1/p' <<<"$out")
	[[ -n $patch ]] && printf 'patch, decoded: %s\n' "$(base64 -d <<<"$patch")"
fi
show "go-image-registries (standard Go guest of sdk/): images from registries that are not allowed are rejected" \
	"$TG" run examples/go-image-registries/policy.wasm -r examples/go-image-registries/testdata/pod-denied.json -s examples/go-image-registries/testdata/settings.json
show "Latency of the validating example (tollgate bench)" \
	"$TG" bench examples/required-labels/policy.wasm -r examples/required-labels/testdata/pod-missing-label.json -s examples/required-labels/testdata/settings.json --count 2000

# Finally the policy server: serve the embedded example policies over HTTPS with a generated
# certificate, send one request per policy through it, and keep serving (Ctrl-C stops it; set
# DEMO_EXIT=1 to stop after the sample requests).
exit_flag=()
[[ "${DEMO_EXIT:-}" == 1 ]] && exit_flag=(--demo-exit)
printf '\n\033[1m%s\033[0m\n$ %s\n' "tollgate serve: the admission webhook on the embedded example policies (Ctrl-C to stop)" \
	"$TG serve --demo --addr 127.0.0.1 ${exit_flag[*]}"
exec "$TG" serve --demo --addr 127.0.0.1 "${exit_flag[@]}"
