package server

import (
	"fmt"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// loadProgress is the start-up load as the probe port shows it until the
// first set serves: which policies of the first configuration finished
// loading (loaded or failed), for /readiness, /policies and /metrics.
type loadProgress struct {
	cfg   *config.Config
	gauge prometheus.Gauge

	mu   sync.Mutex
	done map[string]status.Policy // by id: the entries whose load ended
}

func newLoadProgress(cfg *config.Config, gauge prometheus.Gauge) *loadProgress {
	gauge.Set(float64(len(cfg.Policies)))
	return &loadProgress{cfg: cfg, gauge: gauge, done: map[string]status.Policy{}}
}

// settled records that e's load ended (build's settled callback).
func (p *loadProgress) settled(e *entry) {
	st := e.status()
	p.mu.Lock()
	p.done[e.cfg.ID] = st
	n := len(p.cfg.Policies) - len(p.done)
	p.mu.Unlock()
	p.gauge.Set(float64(n))
}

// String is /readiness's answer while loading: "loading: 3 of 5 policies".
func (p *loadProgress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("loading: %d of %d policies", len(p.cfg.Policies)-len(p.done), len(p.cfg.Policies))
}

// policies is GET /policies while loading: generation 0, the digest of the
// file being loaded, and each policy's state (loading until its load ended).
func (p *loadProgress) policies() status.Policies {
	out := status.Policies{Embedded: p.cfg.Embedded, Policies: make([]status.Policy, 0, len(p.cfg.Policies))}
	if p.cfg.Source != nil {
		out.ConfigDigest = status.Digest(p.cfg.Source)
	}
	p.mu.Lock()
	for i := range p.cfg.Policies {
		c := &p.cfg.Policies[i]
		st, ok := p.done[c.ID]
		if !ok {
			st = loadingStatus(c)
		}
		out.Policies = append(out.Policies, st)
	}
	p.mu.Unlock()
	sort.Slice(out.Policies, func(i, j int) bool { return out.Policies[i].ID < out.Policies[j].ID })
	return out
}

// loadingStatus is the /policies form of a policy whose load has not ended.
func loadingStatus(c *config.Policy) status.Policy {
	st := policyStatus(c, status.StateLoading)
	if !c.IsGroup() {
		st.Module = c.Module
		return st
	}
	for _, m := range c.Group.Members {
		st.Members = append(st.Members, status.Member{Name: m.Name, Module: m.Module, State: status.StateLoading})
	}
	return st
}
