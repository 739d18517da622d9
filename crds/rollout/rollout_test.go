package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// revision is a ControllerRevision of p, number n, with data d.
func revision(p v1.Policy, ns, name string, n int64, cause string, d v1.RevisionData) *appsv1.ControllerRevision {
	raw, _ := json.Marshal(d)
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{v1.RevisionPolicyUIDLabel: string(p.GetUID())},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: p.PolicyKind(), Name: p.GetName(),
				UID: p.GetUID(), Controller: ptr.To(true)}}},
		Data: runtime.RawExtension{Raw: raw}, Revision: n,
	}
	if cause != "" {
		cr.Annotations = map[string]string{v1.ChangeCauseAnnotation: cause}
	}
	return cr
}

func single(module, digest, manifest, settings string) v1.RevisionData {
	d := v1.RevisionData{RevisionModule: v1.RevisionModule{Module: module, ModuleDigest: digest, ManifestDigest: manifest}}
	if settings != "" {
		d.Settings = json.RawMessage(settings)
	}
	return d
}

const manifestDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func TestHistoryAndUndo(t *testing.T) {
	ctx := context.Background()
	p := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "labels", UID: "u1"}}
	p.Spec.Module = "registry://r.example/labels:v2"
	p.Spec.Settings = runtime.RawExtension{Raw: []byte(`{"mandatory":["owner","cost"]}`)}
	p.Status.Revision = &v1.RevisionStatus{Name: "labels-b", Number: 2}
	other := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "other", UID: "u2"}}
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "labels", UID: "u3"}}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(p, other, ap,
		revision(p, "tollgate", "labels-a", 1, "", single("registry://r.example/labels:v1", "sha256:aaa", manifestDigest, `{"mandatory":["owner"]}`)),
		revision(p, "tollgate", "labels-b", 2, "v2 with cost", single("registry://r.example/labels:v2", "sha256:bbb", "", `{"mandatory":["owner","cost"]}`)),
		revision(p, "tollgate", "labels-c", 3, "failed to load", single("registry://r.example/labels:v3", "", "", "")),
		revision(other, "tollgate", "other-a", 1, "", single("registry://r.example/other:v1", "sha256:ooo", "", "")),
	).Build()

	// Finding the policy.
	for _, tc := range []struct {
		args []string
		ns   string
		want string // Ref or an error's text
	}{
		{[]string{"cap/labels"}, "", "clusteradmissionpolicy.policies.tollgate.dev/labels"},
		{[]string{"clusteradmissionpolicies", "labels"}, "", "clusteradmissionpolicy.policies.tollgate.dev/labels"},
		{[]string{"ClusterAdmissionPolicy.policies.tollgate.dev/labels"}, "", "clusteradmissionpolicy.policies.tollgate.dev/labels"},
		{[]string{"labels"}, "", "clusteradmissionpolicy.policies.tollgate.dev/labels"},
		{[]string{"labels"}, "shop", `"labels" names 2 policies`},
		{[]string{"ap/labels"}, "shop", "admissionpolicy.policies.tollgate.dev/labels"},
		{[]string{"ap/labels"}, "", "give --namespace"},
		{[]string{"deploy/labels"}, "", `unknown kind "deploy"`},
		{[]string{"cap/none"}, "", `no policy named "none"`},
	} {
		got, err := Get(ctx, c, tc.args, tc.ns)
		s := ""
		if err != nil {
			s = err.Error()
		} else {
			s = Ref(got)
		}
		if !strings.Contains(s, tc.want) {
			t.Errorf("Get(%v, %q) = %s, want %s", tc.args, tc.ns, s, tc.want)
		}
	}

	revs, err := History(ctx, c, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 3 || revs[0].Number != 1 || revs[2].Number != 3 || !revs[1].Current || revs[0].Current || revs[1].ChangeCause != "v2 with cost" {
		t.Fatalf("history %+v", revs)
	}

	// The newest revision the spec does not hold: 3 (the spec went back to 2 since, and the
	// controller has not renumbered 2 yet).
	if r, skip, err := Target(p, revs, 0); err != nil || skip || r.Number != 3 {
		t.Fatalf("Target(0) = %d %v %v", r.Number, skip, err)
	}
	if r, skip, err := Target(p, revs, 2); err != nil || !skip || r.Number != 2 {
		t.Fatalf("Target(2) = %d %v %v", r.Number, skip, err)
	}
	if _, _, err := Target(p, revs, 7); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "revision 7") {
		t.Fatalf("Target(7): %v", err)
	}
	if _, _, err := Target(other, nil, 0); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no rollout history found") {
		t.Fatalf("Target without history: %v", err)
	}

	stale := p.DeepCopy()
	// Undo to 1: the module pinned to its manifest digest, its settings, its (absent) cause.
	r, skip, err := Undo(ctx, c, p, 1)
	if err != nil || skip || r.Number != 1 {
		t.Fatalf("Undo = %d %v %v", r.Number, skip, err)
	}
	var got v1.ClusterAdmissionPolicy
	if err := c.Get(ctx, client.ObjectKey{Name: "labels"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Module != "registry://r.example/labels:v1@"+manifestDigest || string(got.Spec.Settings.Raw) != `{"mandatory":["owner"]}` {
		t.Fatalf("after undo: module %s settings %s", got.Spec.Module, got.Spec.Settings.Raw)
	}
	if _, ok := got.Annotations[v1.ChangeCauseAnnotation]; ok {
		t.Fatalf("change cause %q after an undo to a revision without one", got.Annotations[v1.ChangeCauseAnnotation])
	}

	// Undo to 3 from the stale copy: refused, the policy changed since it was read.
	if _, _, err := Undo(ctx, c, stale, 3); err == nil || !strings.Contains(err.Error(), "restoring revision 3") || !strings.Contains(err.Error(), "spec changed") {
		t.Fatalf("undo from a stale read: %v", err)
	}
	// At once another undo, the status still naming 2: the spec holds 1 (pinned), so the
	// previous revision is the newest other one, 3 (no settings): settings removed, the cause
	// restored.
	if !SpecHolds(&got, revs[0].Data) || SpecHolds(&got, revs[1].Data) {
		t.Fatalf("SpecHolds: the spec after the undo to 1 is not revision 1 alone")
	}
	if r, _, err := Undo(ctx, c, &got, 0); err != nil || r.Number != 3 {
		t.Fatalf("undo right after an undo: revision %d, %v", r.Number, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "labels"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Module != "registry://r.example/labels:v3" || len(got.Spec.Settings.Raw) != 0 || got.Annotations[v1.ChangeCauseAnnotation] != "failed to load" {
		t.Fatalf("after undo to 3: module %s settings %s annotations %v", got.Spec.Module, got.Spec.Settings.Raw, got.Annotations)
	}

	// A write that leaves the spec alone (here a label; the controller's status writes alike)
	// between the read and the undo: the undo reads the policy again and goes through.
	read := got.DeepCopy()
	touched := got.DeepCopy()
	touched.Labels = map[string]string{"touched": "yes"}
	if err := c.Update(ctx, touched); err != nil {
		t.Fatal(err)
	}
	if touched.ResourceVersion == read.ResourceVersion {
		t.Fatalf("the label's update kept resourceVersion %s", read.ResourceVersion)
	}
	if r, _, err := Undo(ctx, c, read, 1); err != nil || r.Number != 1 {
		t.Fatalf("undo after a write that left the spec alone: revision %d, %v", r.Number, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "labels"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Module != "registry://r.example/labels:v1@"+manifestDigest || got.Labels["touched"] != "yes" {
		t.Fatalf("after the retried undo: module %s labels %v", got.Spec.Module, got.Labels)
	}
}

// TestUndoPatchGroup: a group's undo restores each member of the revision and removes the
// others; a revision of the wrong shape is refused.
func TestUndoPatchGroup(t *testing.T) {
	g := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", UID: "ug"}}
	g.Spec.Policies = map[string]v1.ClusterPolicyGroupMember{"a": {}, "b": {}, "extra": {}}
	r := Revision{Number: 4, Data: v1.RevisionData{Policies: map[string]v1.RevisionModule{
		"a": {Module: "registry://r/a:v1", ManifestDigest: manifestDigest, Settings: json.RawMessage(`{"x":1}`)},
		"b": {Module: "https://example.com/b.wasm", ManifestDigest: manifestDigest},
	}}}
	b, err := UndoPatch(g, r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"kubernetes.io/change-cause":null}},"spec":{"policies":{"a":{"module":"registry://r/a:v1@` + manifestDigest +
		`","settings":{"x":1}},"b":{"module":"https://example.com/b.wasm","settings":null},"extra":null}}}`
	if string(b) != want {
		t.Fatalf("patch\n%s\nwant\n%s", b, want)
	}
	if _, err := UndoPatch(g, Revision{Number: 1, Data: single("registry://r/a:v1", "", "", "")}); err == nil {
		t.Fatal("a single policy's revision restored into a group")
	}
	if got := PinnedModule(v1.RevisionModule{Module: "registry://r/a:v1@sha256:0000", ManifestDigest: manifestDigest}); got != "registry://r/a:v1@"+manifestDigest {
		t.Fatalf("PinnedModule of a pinned URI: %s", got)
	}
}

// TestUndoGroupExpression: a group's revision holds its expression; an undo restores it with the
// members, a spec that differs from a revision only by its expression does not hold it, and a
// revision recorded before expressions were kept (none) restores the members and leaves the
// expression as it is.
func TestUndoGroupExpression(t *testing.T) {
	ctx := context.Background()
	g := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", UID: "ug"}}
	member := func(module string) v1.ClusterPolicyGroupMember {
		return v1.ClusterPolicyGroupMember{ModuleSpec: v1.ModuleSpec{Module: module}}
	}
	g.Spec.Policies = map[string]v1.ClusterPolicyGroupMember{"a": member("https://example.com/a2.wasm"), "b": member("https://example.com/b.wasm")}
	g.Spec.Expression = "a() && b()"
	g.Status.Revision = &v1.RevisionStatus{Name: "g-3", Number: 3}
	group := func(a, expression string) v1.RevisionData {
		return v1.RevisionData{Expression: expression, Policies: map[string]v1.RevisionModule{
			"a": {Module: "https://example.com/" + a + ".wasm"}, "b": {Module: "https://example.com/b.wasm"}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(g,
		revision(g, "tollgate", "g-1", 1, "", group("a1", "")), // recorded before expressions were kept
		revision(g, "tollgate", "g-2", 2, "a or b", group("a2", "a() || b()")),
		revision(g, "tollgate", "g-3", 3, "a and b", group("a2", "a() && b()")),
	).Build()
	revs, err := History(ctx, c, g)
	if err != nil || len(revs) != 3 || revs[1].Data.Expression != "a() || b()" {
		t.Fatalf("history %+v %v", revs, err)
	}
	if !SpecHolds(g, revs[2].Data) || SpecHolds(g, revs[1].Data) {
		t.Fatal("SpecHolds: a spec that differs from revision 2 by its expression alone holds it, or does not hold revision 3")
	}
	b, err := UndoPatch(g, revs[1])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"kubernetes.io/change-cause":"a or b"}},"spec":{"expression":"a() || b()","policies":{"a":{"module":"https://example.com/a2.wasm","settings":null},"b":{"module":"https://example.com/b.wasm","settings":null}}}}`
	if string(b) != want {
		t.Fatalf("patch\n%s\nwant\n%s", b, want)
	}
	// The previous revision is 2: the members are the same, the expression is not.
	if r, skip, err := Undo(ctx, c, g, 0); err != nil || skip || r.Number != 2 {
		t.Fatalf("Undo = %d %v %v", r.Number, skip, err)
	}
	var got v1.ClusterAdmissionPolicyGroup
	if err := c.Get(ctx, client.ObjectKey{Name: "g"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Expression != "a() || b()" || got.Spec.Policies["a"].Module != "https://example.com/a2.wasm" || !SpecHolds(&got, revs[1].Data) {
		t.Fatalf("after the undo to 2: expression %q, members %+v", got.Spec.Expression, got.Spec.Policies)
	}
	// Revision 1 has no expression: its members come back, the expression stays.
	if r, skip, err := Undo(ctx, c, &got, 1); err != nil || skip || r.Number != 1 {
		t.Fatalf("Undo to 1 = %d %v %v", r.Number, skip, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "g"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Expression != "a() || b()" || got.Spec.Policies["a"].Module != "https://example.com/a1.wasm" || !SpecHolds(&got, revs[0].Data) {
		t.Fatalf("after the undo to 1: expression %q, members %+v", got.Spec.Expression, got.Spec.Policies)
	}
}
