# Rejects an Ingress whose host another Ingress of the cluster already uses.
#
# A context-aware policy for executionMode opa: it never calls the host.
# Before each evaluation the host lists every Ingress (the kind declared in
# contextAwareResources) and hands them to the policy as
# data.kubernetes.ingresses[namespace][name], kube-mgmt's layout, as
# Kubewarden does. The Ingress itself (same namespace and name, as in an
# UPDATE) is not a conflict.
package kubernetes.admission

deny[msg] {
	input.request.kind.kind == "Ingress"
	host := input.request.object.spec.rules[_].host
	other := data.kubernetes.ingresses[ns][name]
	not is_self(ns, name)
	other.spec.rules[_].host == host
	msg := sprintf("Ingress %s/%s: host \"%s\" is already used by Ingress %s/%s", [
		input.request.namespace,
		input.request.object.metadata.name,
		host, ns, name,
	])
}

is_self(ns, name) {
	ns == input.request.namespace
	name == input.request.object.metadata.name
}
