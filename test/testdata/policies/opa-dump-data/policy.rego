# A test fixture: rejects every request with, as its message, the JSON of the
# Kubernetes data the host gave it (data.kubernetes, "absent" when there is
# none) and of its setting `setting`.
package policy

default kube = "absent"

kube = data.kubernetes

default setting = "absent"

setting = data.setting

main = {"response": {
	"uid": input.request.uid,
	"allowed": false,
	"status": {"message": json.marshal({"kubernetes": kube, "setting": setting})},
}}
