package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// revisionsOf returns p's ControllerRevisions in ns, oldest revision first.
func (e *env) revisionsOf(p v1.Policy, ns string) []appsv1.ControllerRevision {
	e.t.Helper()
	revs, err := ownedRevisions(e.ctx, e.c, p, ns)
	if err != nil {
		e.t.Fatal(err)
	}
	return revs
}

// change sets p's settings to settings (a new generation), writes the server's configuration
// and makes the replica serve it with the module digest digest, then reconciles.
func (e *env) change(s *fakeServer, p *v1.ClusterAdmissionPolicy, settings, digest, cause string) {
	e.t.Helper()
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(p), p); err != nil {
		e.t.Fatal(err)
	}
	p.Spec.Settings = runtime.RawExtension{Raw: []byte(settings)}
	p.Generation++
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[v1.ChangeCauseAnnotation] = cause
	if err := e.c.Update(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	pol := ready(id)
	pol.Digest, pol.ManifestDigest = digest, "sha256:manifest-"+strings.TrimPrefix(digest, "sha256:")
	s.serve(e.writeConfig("default", p), pol)
	e.reconcile(p)
	wantStage(e.t.(*testing.T), p, v1.PolicyStatusActive, ReasonPolicyActive)
}

// TestRevisions: each new module digest or settings an active policy serves is a
// ControllerRevision owned by the policy, numbered in order; serving an older one again (an
// undo) renumbers it rather than copying it; spec.revisionHistoryLimit bounds the others;
// status.revision names the serving one, with an Event; a change that is neither (another
// field) makes none, and an unchanged policy costs no write.
func TestRevisions(t *testing.T) {
	p := cap1("rev")
	p.UID = "uid-rev"
	p.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	e := newEnv(t, policyServer("default"), p)
	s := e.addServer("default")

	e.change(s, p, `{"b":1,"a":[1,2]}`, "sha256:aaa", "first")
	revs := e.revisionsOf(p, testNS)
	if len(revs) != 1 || revs[0].Revision != 1 {
		t.Fatalf("revisions %+v", revs)
	}
	r1 := revs[0]
	if !metav1.IsControlledBy(&r1, p) || !strings.HasPrefix(r1.Name, "rev-") || r1.Annotations[v1.ChangeCauseAnnotation] != "first" ||
		r1.Labels[v1.RevisionPolicyUIDLabel] != "uid-rev" || r1.Labels[v1.RevisionPolicyKindLabel] != "ClusterAdmissionPolicy" {
		t.Fatalf("revision %+v", r1.ObjectMeta)
	}
	var d v1.RevisionData
	if err := json.Unmarshal(r1.Data.Raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Module != "registry://example/policy:v1" || d.ModuleDigest != "sha256:aaa" || d.ManifestDigest != "sha256:manifest-aaa" || string(d.Settings) != `{"a":[1,2],"b":1}` {
		t.Fatalf("revision data %s", r1.Data.Raw)
	}
	if st := p.Status.Revision; st == nil || st.Name != r1.Name || st.Number != 1 || st.ModuleDigest != "sha256:aaa" || st.ActiveSince.IsZero() {
		t.Fatalf("status.revision %+v", st)
	}
	if evs := e.events(); !containsPrefix(evs, "Normal RevisionActive revision 1 (ControllerRevision "+r1.Name+") is active: module sha256:aaa") {
		t.Fatalf("events %q", evs)
	}
	since := p.Status.Revision.ActiveSince

	// Unchanged: nothing written, the revision's time stays.
	before := e.writes.Load()
	e.reconcile(p)
	if n := e.writes.Load() - before; n != 0 || !p.Status.Revision.ActiveSince.Equal(&since) {
		t.Fatalf("%d writes, activeSince %v then %v", n, since, p.Status.Revision.ActiveSince)
	}

	// The same settings written otherwise and the same digest: the same revision.
	e.change(s, p, `{"a":[1,2],  "b":1}`, "sha256:aaa", "reformatted")
	if revs := e.revisionsOf(p, testNS); len(revs) != 1 {
		t.Fatalf("%d revisions after an equal change", len(revs))
	}

	// A new module digest: revision 2; new settings: revision 3.
	e.change(s, p, `{"a":[1,2],"b":1}`, "sha256:bbb", "new module")
	e.change(s, p, `{"a":[3]}`, "sha256:bbb", "new settings")
	revs = e.revisionsOf(p, testNS)
	if len(revs) != 3 || revs[1].Revision != 2 || revs[2].Revision != 3 || p.Status.Revision.Number != 3 {
		t.Fatalf("revisions %v, status %+v", revNumbers(revs), p.Status.Revision)
	}

	// Back to the first: it is renumbered 4, not copied; the history keeps 2 besides it.
	e.change(s, p, `{"b":1,"a":[1,2]}`, "sha256:aaa", "undo")
	revs = e.revisionsOf(p, testNS)
	if got := revNumbers(revs); got != "rev2 rev3 rev4="+r1.Name {
		t.Fatalf("revisions %s", got)
	}
	if p.Status.Revision.Name != r1.Name || p.Status.Revision.Number != 4 || revs[2].Annotations[v1.ChangeCauseAnnotation] != "undo" {
		t.Fatalf("status %+v, annotations %v", p.Status.Revision, revs[2].Annotations)
	}

	// Beyond the limit the oldest goes.
	e.change(s, p, `{"c":true}`, "sha256:aaa", "more")
	if got := revNumbers(e.revisionsOf(p, testNS)); !strings.HasPrefix(got, "rev3 rev4 rev5=rev-") {
		t.Fatalf("revisions %s", got)
	}
}

func revNumbers(revs []appsv1.ControllerRevision) string {
	var out []string
	for _, r := range revs {
		out = append(out, fmt.Sprintf("rev%d", r.Revision))
	}
	s := strings.Join(out, " ")
	if len(revs) > 0 {
		s += "=" + revs[len(revs)-1].Name
	}
	return s
}

func containsPrefix(ss []string, prefix string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// TestRevisionsOfGroupsAndNamespaced: a namespaced policy's revisions live in its namespace; a
// group's revision holds each member's module digest and settings and its expression, and a
// change of the expression alone is a revision.
func TestRevisionsOfGroupsAndNamespaced(t *testing.T) {
	rules := []v1.RuleWithOperations{{Operations: []v1.OperationType{"CREATE"}, APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	apg := &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "g", Generation: 1, UID: "uid-g"}}
	apg.Spec.PolicyServer, apg.Spec.Rules = "default", rules
	apg.Spec.Expression, apg.Spec.Message = "signed() && tag()", "signed and tagged"
	apg.Spec.Policies = map[string]v1.PolicyGroupMember{
		"signed": {ModuleSpec: v1.ModuleSpec{Module: "registry://example/signed:v1", Settings: runtime.RawExtension{Raw: []byte(`{"k":1}`)}}},
		"tag":    {ModuleSpec: v1.ModuleSpec{Module: "registry://example/tag:v1"}},
	}
	e := newEnv(t, policyServer("default"), apg)
	s := e.addServer("default")
	id := v1.PolicyID(apg.PolicyKind(), apg.Namespace, apg.Name)
	pol := ready(id)
	pol.Kind = status.KindGroup
	pol.Members = []status.Member{{Name: "signed", Digest: "sha256:s1", ManifestDigest: "sha256:ms1", State: status.StateReady}, {Name: "tag", Digest: "sha256:t1", State: status.StateReady}}
	s.serve(e.writeConfig("default", apg), pol)
	e.reconcile(apg)
	wantStage(t, apg, v1.PolicyStatusActive, ReasonPolicyActive)
	if revs := e.revisionsOf(apg, testNS); len(revs) != 0 {
		t.Fatalf("a namespaced policy's revision in the controller's namespace: %+v", revs)
	}
	revs := e.revisionsOf(apg, "team")
	if len(revs) != 1 {
		t.Fatalf("revisions in team: %d", len(revs))
	}
	var d v1.RevisionData
	if err := json.Unmarshal(revs[0].Data.Raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Module != "" || d.Policies["signed"].ModuleDigest != "sha256:s1" || d.Policies["signed"].ManifestDigest != "sha256:ms1" || string(d.Policies["signed"].Settings) != `{"k":1}` ||
		d.Policies["tag"].Module != "registry://example/tag:v1" || d.Policies["tag"].ModuleDigest != "sha256:t1" {
		t.Fatalf("group revision %s", revs[0].Data.Raw)
	}
	if apg.Status.Revision == nil || apg.Status.Revision.Name != revs[0].Name || apg.Status.Revision.ModuleDigest != "" {
		t.Fatalf("status.revision %+v", apg.Status.Revision)
	}
	if d.Expression != "signed() && tag()" {
		t.Fatalf("group revision %s: want the expression", revs[0].Data.Raw)
	}

	// The expression changed, the members did not: revision 2, holding the new expression.
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(apg), apg); err != nil {
		t.Fatal(err)
	}
	apg.Spec.Expression = "signed() || tag()"
	apg.Generation++
	if err := e.c.Update(e.ctx, apg); err != nil {
		t.Fatal(err)
	}
	s.serve(e.writeConfig("default", apg), pol)
	e.reconcile(apg)
	wantStage(t, apg, v1.PolicyStatusActive, ReasonPolicyActive)
	revs = e.revisionsOf(apg, "team")
	if len(revs) != 2 || revs[1].Revision != 2 || apg.Status.Revision.Name != revs[1].Name {
		t.Fatalf("after an expression edit: revisions %s, status %+v", revNumbers(revs), apg.Status.Revision)
	}
	if err := json.Unmarshal(revs[1].Data.Raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Expression != "signed() || tag()" || d.Policies["signed"].ModuleDigest != "sha256:s1" {
		t.Fatalf("revision 2: %s", revs[1].Data.Raw)
	}
}

// TestRevisionHashAndName: the hash depends on the policy, the digests and the settings, not
// on the URI when a digest is known; names fit in 253 characters.
func TestRevisionHashAndName(t *testing.T) {
	m := func(uri, digest, settings string) v1.RevisionData {
		d := v1.RevisionData{RevisionModule: v1.RevisionModule{Module: uri, ModuleDigest: digest}}
		if settings != "" {
			d.Settings = json.RawMessage(settings)
		}
		return d
	}
	base := RevisionHash("u", m("registry://r/p:v1", "sha256:a", `{"x":1}`))
	for _, tc := range []struct {
		uid  types.UID
		d    v1.RevisionData
		same bool
	}{
		{"u", m("registry://r/p:v1@sha256:0123", "sha256:a", `{"x":1}`), true},
		{"v", m("registry://r/p:v1", "sha256:a", `{"x":1}`), false},
		{"u", m("registry://r/p:v1", "sha256:b", `{"x":1}`), false},
		{"u", m("registry://r/p:v1", "sha256:a", `{"x":2}`), false},
		{"u", m("registry://r/p:v1", "", `{"x":1}`), false},
	} {
		if got := RevisionHash(tc.uid, tc.d) == base; got != tc.same {
			t.Errorf("RevisionHash(%s, %+v) equal %v, want %v", tc.uid, tc.d, got, tc.same)
		}
	}
	group := func(expression string) v1.RevisionData {
		return v1.RevisionData{Expression: expression, Policies: map[string]v1.RevisionModule{"a": {Module: "registry://r/a:v1", ModuleDigest: "sha256:a"}}}
	}
	if g := RevisionHash("u", group("a()")); g == RevisionHash("u", group("!a()")) || g != RevisionHash("u", group("a()")) || g == RevisionHash("u", group("")) {
		t.Errorf("a group's RevisionHash does not follow its expression")
	}
	if n := RevisionName(strings.Repeat("a", 253), base); len(n) != 253 || !strings.HasSuffix(n, "-"+base) {
		t.Errorf("RevisionName of a long name: %d characters %q", len(n), n)
	}
}

// TestLoadingIsNotLoadFailed: a replica still loading the policy's new version (its previous
// version serving meanwhile: stale, loading) leaves the policy Pending with PolicyLoading, polled
// at the usual interval and without a Warning; it is not a failed load (which is polled 10 times
// slower: every change of an active policy waited for it).
func TestLoadingIsNotLoadFailed(t *testing.T) {
	p := cap1("loading")
	e := newEnv(t, policyServer("default"), p)
	s := e.addServer("default")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	pol := ready(id)
	pol.Stale, pol.Loading, pol.Error = true, true, "its version in the serving configuration is still loading"
	s.serve(e.writeConfig("default", p), pol)
	res := e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyLoading)
	if res.RequeueAfter != 500*time.Millisecond {
		t.Errorf("requeue after %v, want the poll interval", res.RequeueAfter)
	}
	for _, ev := range e.events() {
		if strings.HasPrefix(ev, "Warning") {
			t.Errorf("event %q while the policy loads", ev)
		}
	}

	// Its first load (nothing serves it yet): the same.
	pol = ready(id)
	pol.State = status.StateLoading
	s.serve(e.writeConfig("default", p), pol)
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyLoading)
}
