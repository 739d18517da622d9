package capabilities

import "testing"

// BenchGet is a get_resource payload of the fake cluster's default Namespace.
const BenchGet = benchGet

// WarmGet is a host-call function on the fake cluster whose Namespace cache
// is synced (for tests outside the package).
func WarmGet(t testing.TB) HostCallFunc { return warmGet(t) }
