# A test fixture in the gatekeeper execution mode: its violation rule runs for billions of
# iterations, so that only the host's deadline ends it. Rego has no sleep (no builtin waits), so
# this is how a Gatekeeper policy holds a worker for as long as it can.
package policy

r := numbers.range(1, 5000)

# A set of strings: scanning it allocates nothing, so the loop runs into the deadline, not the
# memory cap (as opa-misbehave's "endless").
strs := {format_int(n, 10) | n := r[_]}

violation[{"msg": msg}] {
	strs[a]
	strs[b]
	strs[c]
	a == "nope"
	msg := sprintf("unreachable %v %v", [b, c])
}
