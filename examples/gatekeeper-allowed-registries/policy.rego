# A Gatekeeper ConstraintTemplate's Rego: containers of a Pod must pull their images from one of
# the registries in the parameters (`registries`, a list of prefixes), and never with the tag
# `latest`. In executionMode gatekeeper the parameters are the policy's settings.
package policy

containers[c] {
	c := input.review.object.spec.containers[_]
}

containers[c] {
	c := input.review.object.spec.initContainers[_]
}

violation[{"msg": msg}] {
	c := containers[_]
	not allowed_registry(c.image)
	msg := sprintf("container %s: image %s comes from none of the allowed registries %v", [c.name, c.image, input.parameters.registries])
}

violation[{"msg": msg}] {
	c := containers[_]
	endswith(c.image, ":latest")
	msg := sprintf("container %s: image %s uses the tag latest", [c.name, c.image])
}

allowed_registry(image) {
	startswith(image, input.parameters.registries[_])
}
