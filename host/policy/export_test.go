package policy

// ClusterBuilds is how many data documents a context-aware Rego policy built.
func ClusterBuilds(p *Policy) int64 {
	if c, ok := p.ev.(interface{ ClusterBuilds() int64 }); ok {
		return c.ClusterBuilds()
	}
	return 0
}

// MemoryBytes is what counts against the host's memory budget now.
func (h *Host) MemoryBytes() int64 { return h.engine.MemoryBytes() }
