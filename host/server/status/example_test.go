package status_test

import (
	"encoding/json"
	"fmt"

	"github.com/tollgate-dev/tollgate/host/server/status"
)

func ExampleDigest() {
	// the digest the operator annotates the ConfigMap with, and that
	// GET /policies reports as configDigest once the server serves the file
	fmt.Println(status.Digest([]byte("{}")))
	// Output: sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a
}

func ExamplePolicies_Serves() {
	file := []byte(`{"labels":{"module":"registry://example.com/labels:v2","settings":{"mandatory_labels":3}}}`)
	body := `{
	  "generation": 2,
	  "configDigest": "` + status.Digest(file) + `",
	  "lastReload": {"ok": true, "trigger": "file", "digest": "` + status.Digest(file) + `"},
	  "policies": [{"id": "labels", "kind": "policy", "mode": "protect", "state": "ready",
	    "stale": true, "error": "settings rejected by the policy: mandatory_labels must be a list"}]
	}`
	var ps status.Policies
	if err := json.Unmarshal([]byte(body), &ps); err != nil {
		panic(err)
	}
	fmt.Println(ps.Serves(status.Digest(file), "labels"))
	// Output: the policy is not loaded: policy labels: its new version failed to load (the previous one keeps serving): settings rejected by the policy: mandatory_labels must be a list
}
