# A test fixture: one violation whose message is the JSON of the Kubernetes
# inventory the host gave it (data.inventory, "absent" when there is none)
# and of its parameters.
package policy

default inv = "absent"

inv = data.inventory

violation[{"msg": msg}] {
	msg := json.marshal({"inventory": inv, "parameters": input.parameters})
}
