# The entrypoint of an executionMode opa policy (built with `opa build -t wasm
# -e policy/main utility/policy.rego policy.rego`): it turns the `deny` set of
# package kubernetes.admission into an AdmissionReview response, rejecting
# with code 409 (Conflict) and the messages joined by ", ".
package policy

import data.kubernetes.admission

main = {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
}

default uid = ""

uid = input.request.uid

response = {
	"uid": uid,
	"allowed": false,
	"status": {"message": reason, "code": 409},
} {
	reason = concat(", ", admission.deny)
	reason != ""
} else = {
	"uid": uid,
	"allowed": true,
}
