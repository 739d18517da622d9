# Rejects objects that lack a label listed in the settings (`labels`, a list of names).
# Settings are the policy's `data` in executionMode opa.
package kubernetes.admission

deny[msg] {
	required := data.labels[_]
	not input.request.object.metadata.labels[required]
	msg := sprintf("%s %s/%s: mandatory label %q is missing", [
		input.request.kind.kind,
		object_namespace,
		input.request.object.metadata.name,
		required,
	])
}

default object_namespace = ""

object_namespace = input.request.namespace
