package operator

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPolicyServerProbes: the probes of the policy server container, as `tollgate serve`
// answers them (RATIONALE.md "Why do the probes answer before policies load?"). Liveness asks
// /livez, which answers from the first second of the process however long the policies take
// to load (a cold compilation of the MutatingAdmissionPolicy module takes 25-30 s, more under
// a CPU limit), so it needs no initial delay and no startupProbe; a startupProbe, or liveness on
// /readiness, would put a deadline on the load and kill the container in the middle of a slow
// compilation, before its compilation cache was written. Readiness asks /readiness, 503 until
// every policy loaded and the webhook port serves. Both on the probe port, by its name.
func TestPolicyServerProbes(t *testing.T) {
	e := newPSEnv(t)
	for _, port := range []*int32{nil, cfgI32(9081)} {
		ps := psObj("p")
		ps.Spec.ReadinessProbePort = port
		c := e.r.desiredDeployment(ps).Spec.Template.Spec.Containers[0]
		_, probePort := serverPorts(ps)
		if !slices.Contains(c.Args, "--readiness-probe-port="+strconv.Itoa(int(probePort))) {
			t.Fatalf("args %v: no --readiness-probe-port=%d", c.Args, probePort)
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == ServicePortReadiness && p.ContainerPort == probePort
		}) {
			t.Fatalf("container ports %+v: none named %q on %d", c.Ports, ServicePortReadiness, probePort)
		}
		if c.StartupProbe != nil {
			t.Errorf("startupProbe %+v: /livez answers while the policies load, and a startup deadline would kill a slow load", c.StartupProbe)
		}
		for _, tt := range []struct {
			name           string
			p              *corev1.Probe
			path           string
			period, failed int32
		}{
			{"liveness", c.LivenessProbe, "/livez", 10, 3},
			{"readiness", c.ReadinessProbe, "/readiness", 5, 3},
		} {
			p := tt.p
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe %+v, want HTTP GET %s", tt.name, p, tt.path)
				continue
			}
			if g := p.HTTPGet; g.Path != tt.path || g.Port.StrVal != ServicePortReadiness || g.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s probe: %s %s on port %q, want HTTP %s on %q", tt.name, g.Scheme, g.Path, g.Port.String(), tt.path, ServicePortReadiness)
			}
			if p.InitialDelaySeconds != 0 || p.PeriodSeconds != tt.period || p.FailureThreshold != tt.failed {
				t.Errorf("%s probe: initial delay %d s, every %d s, %d failures; want 0, %d, %d",
					tt.name, p.InitialDelaySeconds, p.PeriodSeconds, p.FailureThreshold, tt.period, tt.failed)
			}
		}
	}
}
