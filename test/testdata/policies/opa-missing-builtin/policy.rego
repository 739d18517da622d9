# A test fixture: it calls time.parse_rfc3339_ns and time.date, which Kubewarden's host registers
# only as parse_rfc3339_ns and date, and net.lookup_ip_addr, which it does not offer: a host must
# refuse the module at load, naming all three.
package policy

main = {"response": {"uid": "", "allowed": true, "status": {"message": sprintf("%v %v %v", [
	time.parse_rfc3339_ns(input.t),
	time.date(0),
	net.lookup_ip_addr("localhost"),
])}}}
