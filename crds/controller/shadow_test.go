package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// TestShadowStatus: an active policy with spec.shadow gets status.shadow from its replicas'
// reports, summed (state, evaluations, divergences and drops by kind, the newest diverging
// requests first, at most 5) and is polled every 2 s while it has one; without a shadow the
// field goes and the policy is no longer polled.
func TestShadowStatus(t *testing.T) {
	p := cap1("shadowed")
	p.Spec.Shadow = &v1.PolicyShadow{Settings: &runtime.RawExtension{Raw: []byte(`{"x":1}`)}}
	e := newEnv(t, policyServer("default"), p)
	s1, s2 := e.addServer("default"), e.addServer("default")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	div := func(sec int, uid string) status.Divergence {
		return status.Divergence{Time: t0.Add(time.Duration(sec) * time.Second), UID: uid, Kind: "Pod", Namespace: "shop", Name: "web", Operation: "CREATE",
			Divergence: status.DivergenceVerdict, Serving: status.Answer{Allowed: true},
			Candidate: status.Answer{Code: 400, Message: "the following labels are mandatory: cost-center"}}
	}
	with := func(sh *status.Shadow) status.Policy {
		pol := ready(id)
		pol.Shadow = sh
		return pol
	}
	digest := e.writeConfig("default", p)
	s1.serve(digest, with(&status.Shadow{State: status.StateReady, Evaluations: 20, Divergences: map[string]int64{"verdict": 18, "error": 1},
		Recent: []status.Divergence{div(5, "a5"), div(4, "a4"), div(3, "a3"), div(2, "a2")}}))
	s2.serve(digest, with(&status.Shadow{State: status.StateReady, Evaluations: 10, Divergences: map[string]int64{"verdict": 10},
		Dropped: map[string]int64{"busy": 2}, Recent: []status.Divergence{div(6, "b6"), div(1, "b1")}}))
	res := e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	st := p.Status.Shadow
	if st == nil || st.State != "ready" || st.Evaluations != 30 || st.Divergences["verdict"] != 28 || st.Divergences["error"] != 1 || st.Dropped["busy"] != 2 {
		t.Fatalf("status.shadow %+v", st)
	}
	var uids []string
	for _, d := range st.Recent {
		uids = append(uids, d.UID)
	}
	if strings.Join(uids, " ") != "b6 a5 a4 a3 a2" {
		t.Fatalf("recent %v", uids)
	}
	if r := st.Recent[0]; r.Serving != "allowed" || r.Shadow != "denied (400): the following labels are mandatory: cost-center" || r.Kind != "Pod" || r.Name != "web" {
		t.Fatalf("recent[0] %+v", r)
	}
	if res.RequeueAfter != 2*time.Second {
		t.Fatalf("requeue after %v, want 2s while the policy has a shadow", res.RequeueAfter)
	}

	// One replica could not load the candidate: failed, with its error.
	s2.serve(digest, with(&status.Shadow{State: status.StateFailed, Error: "settings rejected"}))
	e.reconcile(p)
	if st := p.Status.Shadow; st.State != "failed" || st.Error != "settings rejected" || st.Evaluations != 20 {
		t.Fatalf("status.shadow %+v", st)
	}

	// The shadow goes: so does status.shadow, and the polling.
	p.Spec.Shadow = nil
	p.Generation++
	if err := e.c.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	digest = e.writeConfig("default", p)
	s1.serve(digest, ready(id))
	s2.serve(digest, ready(id))
	if res := e.reconcile(p); p.Status.Shadow != nil || res.RequeueAfter != 0 {
		t.Fatalf("without a shadow: status.shadow %+v, requeue %v", p.Status.Shadow, res.RequeueAfter)
	}
}
