package controller

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
)

// entryCache memoizes BuildPolicyEntry per PolicyServer, by policy UID and resourceVersion and
// the server's namespaced capabilities, so that a policy change rebuilds one entry rather than
// validating every policy of the server again. Each build keeps only the policies it was asked
// for, so deleted policies leave the cache.
type entryCache struct {
	mu sync.Mutex
	m  map[string]map[types.UID]cachedEntry // by PolicyServer name
}

type cachedEntry struct {
	version, caps string
	id            string
	entry         config.Entry
	err           error
}

// buildConfig is the package-level buildConfig through the cache.
func (c *entryCache) buildConfig(policies []v1.Policy, ps *v1.PolicyServer, o Options) ([]byte, map[string]error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[types.UID]cachedEntry{}
	}
	prev, next := c.m[ps.Name], map[types.UID]cachedEntry{}
	caps := make([]string, len(ps.Spec.NamespacedPoliciesCapabilities))
	for i, cp := range ps.Spec.NamespacedPoliciesCapabilities {
		caps[i] = string(cp)
	}
	capsKey := strings.Join(caps, ",")
	build := func(p v1.Policy, ps *v1.PolicyServer, o Options) (string, config.Entry, error) {
		uid, version := p.GetUID(), p.GetResourceVersion()
		if uid == "" || version == "" {
			return BuildPolicyEntry(p, ps, o)
		}
		if e, ok := prev[uid]; ok && e.version == version && e.caps == capsKey {
			next[uid] = e
			return e.id, e.entry, e.err
		}
		id, entry, err := BuildPolicyEntry(p, ps, o)
		next[uid] = cachedEntry{version: version, caps: capsKey, id: id, entry: entry, err: err}
		return id, entry, err
	}
	yml, skipped := buildConfig(policies, ps, o, build)
	c.m[ps.Name] = next
	return yml, skipped
}
