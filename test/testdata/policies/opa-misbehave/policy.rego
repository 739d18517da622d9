# A test fixture in the opa execution mode: the settings' "behaviour" (data.behaviour) picks how
# the evaluation ends, to exercise the host's handling of each.
package policy

default behaviour = "answer"

behaviour = data.behaviour

# answer: an AdmissionResponse, rejecting requests whose object is named "bad".
main = {"response": {"uid": "from-the-policy", "allowed": input.request.object.metadata.name != "bad", "status": {"message": "the name is bad", "code": 403}}} {
	behaviour == "answer"
}

# conflict: a complete rule with two values, which OPA's Wasm code reports through opa_abort.
main = {"response": {"uid": "", "allowed": conflict}} {
	behaviour == "conflict"
}

conflict = true {
	behaviour == "conflict"
}

conflict = false {
	behaviour == "conflict"
}

# endless: billions of iterations, cut by the deadline.
main = {"response": {"uid": "", "allowed": endless}} {
	behaviour == "endless"
}

r := numbers.range(1, 5000)

# A set of strings: scanning it allocates nothing (scanning an array makes a
# number for every index), so the loop runs into the deadline, not the memory cap.
strs := {format_int(n, 10) | n := r[_]}

endless {
	strs[a]
	strs[b]
	strs[c]
	a == "nope"
}

# big: a result of 2 MB.
main = {"response": {"uid": "", "allowed": true, "status": {"message": concat("", [s | r[_]; s := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"])}}} {
	behaviour == "big"
}

# no-uid and no-allowed: responses Kubewarden refuses to read.
main = {"response": {"allowed": true}} {
	behaviour == "no-uid"
}

main = {"response": {"uid": "x"}} {
	behaviour == "no-allowed"
}

# patch: an acceptance with a JSONPatch adding a label.
main = {"response": {"uid": "", "allowed": true, "patchType": "JSONPatch", "patch": base64.encode(json.marshal([{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}])), "warnings": ["patched"]}} {
	behaviour == "patch"
}

# undefined: main has no value.
