package controller

import (
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
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
			return p.Name == v1.ServicePortReadiness && p.ContainerPort == probePort
		}) {
			t.Fatalf("container ports %+v: none named %q on %d", c.Ports, v1.ServicePortReadiness, probePort)
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
			{"readiness", c.ReadinessProbe, "/readiness", 1, 15},
		} {
			p := tt.p
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe %+v, want HTTP GET %s", tt.name, p, tt.path)
				continue
			}
			if g := p.HTTPGet; g.Path != tt.path || g.Port.StrVal != v1.ServicePortReadiness || g.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s probe: %s %s on port %q, want HTTP %s on %q", tt.name, g.Scheme, g.Path, g.Port.String(), tt.path, v1.ServicePortReadiness)
			}
			if p.InitialDelaySeconds != 0 || p.PeriodSeconds != tt.period || p.FailureThreshold != tt.failed {
				t.Errorf("%s probe: initial delay %d s, every %d s, %d failures; want 0, %d, %d",
					tt.name, p.InitialDelaySeconds, p.PeriodSeconds, p.FailureThreshold, tt.period, tt.failed)
			}
		}
	}
}

// TestDeploymentDriftRepaired: another manager changes fields of the Deployment the controller
// owns (an env value, the container's securityContext, a probe, the resources): the next
// reconcile applies them back; what the other manager added (an annotation, an env var of its
// own) stays. Before server-side apply, only replicas, image, args and the volume count were
// compared, so these edits were never repaired.
func TestDeploymentDriftRepaired(t *testing.T) {
	ps := psObj("p")
	ps.Spec.Env = []corev1.EnvVar{{Name: "TOLLGATE_LOG_LEVEL", Value: "info"}}
	e := newPSEnv(t, ps)
	if _, err, _ := e.reconcile("p"); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("p"); err != nil || len(writes) != 0 {
		t.Fatalf("unchanged reconcile: err %v, writes %v", err, writes)
	}
	dep := e.get(&appsv1.Deployment{}, "policy-server-p").(*appsv1.Deployment)
	want := dep.Spec.Template.Spec.Containers[0].DeepCopy()
	c := &dep.Spec.Template.Spec.Containers[0]
	c.Env[0].Value = "debug"
	c.Env = append(c.Env, corev1.EnvVar{Name: "THEIRS", Value: "1"})
	c.SecurityContext.ReadOnlyRootFilesystem = ptr.To(false)
	c.SecurityContext.Capabilities = nil
	c.ReadinessProbe.PeriodSeconds = 60
	if dep.Annotations == nil {
		dep.Annotations = map[string]string{}
	}
	dep.Annotations["example.com/theirs"] = "kept"
	if err := e.c.Update(e.ctx, dep, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("p"); err != nil || !slices.Equal(writes, []string{"apply Deployment policy-server-p"}) {
		t.Fatalf("drifted reconcile: err %v, writes %v, want the Deployment applied", err, writes)
	}
	dep = e.get(&appsv1.Deployment{}, "policy-server-p").(*appsv1.Deployment)
	got := dep.Spec.Template.Spec.Containers[0]
	if i := slices.IndexFunc(got.Env, func(v corev1.EnvVar) bool { return v.Name == "TOLLGATE_LOG_LEVEL" }); i < 0 || got.Env[i].Value != "info" {
		t.Errorf("env %+v: TOLLGATE_LOG_LEVEL not put back to info", got.Env)
	}
	if !slices.ContainsFunc(got.Env, func(v corev1.EnvVar) bool { return v.Name == "THEIRS" }) {
		t.Errorf("env %+v: another manager's variable was removed", got.Env)
	}
	if !equality.Semantic.DeepEqual(got.SecurityContext, want.SecurityContext) || got.ReadinessProbe.PeriodSeconds != want.ReadinessProbe.PeriodSeconds {
		t.Errorf("securityContext %+v, readiness period %d: not repaired (want %+v, %d)", got.SecurityContext, got.ReadinessProbe.PeriodSeconds,
			want.SecurityContext, want.ReadinessProbe.PeriodSeconds)
	}
	if dep.Annotations["example.com/theirs"] != "kept" {
		t.Errorf("annotations %v: another manager's annotation was removed", dep.Annotations)
	}
	if _, err, writes := e.reconcile("p"); err != nil || len(writes) != 0 {
		t.Fatalf("repaired, then unchanged: err %v, writes %v", err, writes)
	}
}

// TestLegacyFieldsTakenOver: a Deployment written by the controller before server-side apply
// (an Update by the "tollgate" manager) has its fields moved to tollgate-controller's apply
// entry, so that an env var the PolicyServer no longer sets is removed rather than left to the
// old manager.
func TestLegacyFieldsTakenOver(t *testing.T) {
	ps := psObj("p")
	e := newPSEnv(t, ps)
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: "p"}, ps); err != nil {
		t.Fatal(err)
	}
	old := e.r.desiredDeployment(ps)
	old.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "REMOVED", Value: "1"}}
	if err := controllerutil.SetControllerReference(ps, old, e.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(e.ctx, old, client.FieldOwner(LegacyFieldManager)); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("p"); err != nil || !slices.Contains(writes, "patch Deployment policy-server-p") ||
		!slices.Contains(writes, "apply Deployment policy-server-p") {
		t.Fatalf("err %v, writes %v: want the legacy fields patched over, then the Deployment applied", err, writes)
	}
	dep := e.get(&appsv1.Deployment{}, "policy-server-p").(*appsv1.Deployment)
	if env := dep.Spec.Template.Spec.Containers[0].Env; len(env) != 0 {
		t.Errorf("env %+v: the old controller's variable was not removed", env)
	}
	for _, m := range dep.ManagedFields {
		if m.Manager == LegacyFieldManager {
			t.Errorf("managedFields still hold %s %s", m.Manager, m.Operation)
		}
	}
	if _, err, writes := e.reconcile("p"); err != nil || len(writes) != 0 {
		t.Fatalf("taken over, then unchanged: err %v, writes %v", err, writes)
	}
}
