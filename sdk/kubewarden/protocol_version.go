package kubewarden

import "github.com/tollgate-dev/tollgate/sdk/guest"

// ProtocolVersion is the version of the waPC protocol between a Kubewarden
// host and its policies, answered (as a JSON string) by the
// "protocol_version" operation that importing this package registers.
const ProtocolVersion = "v1"

func init() {
	guest.RegisterFunctions(map[string]guest.Function{
		"protocol_version": func([]byte) ([]byte, error) { return []byte(`"` + ProtocolVersion + `"`), nil },
	})
}
