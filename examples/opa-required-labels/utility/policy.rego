# The entrypoint of an executionMode opa policy, as Kubewarden's Rego policies ship it
# (built with `opa build -t wasm -e policy/main utility/policy.rego policy.rego`): it turns
# the `deny` set of package kubernetes.admission into an AdmissionReview response.
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
	"status": {"message": reason},
} {
	reason = concat(", ", admission.deny)
	reason != ""
} else = {
	"uid": uid,
	"allowed": true,
}
