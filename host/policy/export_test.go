package policy

// ClusterBuilds is how many data documents a context-aware Rego policy built.
func ClusterBuilds(p *Policy) int64 {
	if p.rego == nil || p.rego.cluster == nil {
		return 0
	}
	return p.rego.cluster.builds.Load()
}
