# A Gatekeeper ConstraintTemplate's Rego: containers of a Pod must pull their images from one of
# the registries in the parameters (`registries`, a list of prefixes), and never with the tag
# `latest`. In executionMode gatekeeper the parameters are the policy's settings.
package policy

# The containers and init containers, as an array: a set of container objects
# (`containers[c] { c := ... }`, common in Gatekeeper's library) would hash
# every container object into the set, which costs more than the rest of the
# evaluation (see docs/benchmarks.md).
containers := array.concat(object.get(input.review.object.spec, "containers", []), object.get(input.review.object.spec, "initContainers", []))

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
