package audit

import (
	"context"
	"testing"
	"time"

	orv1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// TestForeignReportReplaced: a tenant creates, for its own object, a passing Report at the name
// the audit's report of that object takes (the object's UID), without the audit's label, before
// the audit runs. The full pass and the incremental mode both write the audit's failing result
// over it (counted as replaced), instead of skipping the name and leaving the forged pass.
func TestForeignReportReplaced(t *testing.T) {
	ctx := context.Background()
	p := cap("labels", nil, func(p *v1.ClusterAdmissionPolicy) { p.UID = "pu" })
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "tenant", Name: "cm", UID: "uid-1", ResourceVersion: "7"}
	results := func() *objectResults {
		return &objectResults{ref: ref, results: []Result{{Policy: p.ID, Object: ref, Outcome: Fail, Message: "no owner", Time: time.Unix(1000, 0)}}}
	}
	forged := func() *unstructured.Unstructured {
		r := &orv1.Report{
			TypeMeta:   metav1.TypeMeta{APIVersion: orv1.SchemeGroupVersion.String(), Kind: "Report"},
			ObjectMeta: metav1.ObjectMeta{Name: ref.UID, Namespace: ref.Namespace, Labels: map[string]string{"made-by": "tenant"}},
			Source:     "tenant",
			Results:    []orv1.ReportResult{{Source: ResultSource, Policy: p.ID, Result: "pass"}},
			Summary:    orv1.ReportSummary{Pass: 1},
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	api, err := reportAPIFor(ReportOpenReports)
	if err != nil {
		t.Fatal(err)
	}
	gvr := api.gvr(true)
	newWriter := func() (*reportWriter, *dynfake.FakeDynamicClient) {
		dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{gvr: "ReportList"}, forged())
		return &reportWriter{dyn: dyn, api: api, policies: map[string]*Policy{p.ID: p}, parallel: 2}, dyn
	}
	check := func(t *testing.T, dyn *dynfake.FakeDynamicClient) {
		t.Helper()
		u, err := dyn.Resource(gvr).Namespace(ref.Namespace).Get(ctx, ref.UID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var r orv1.Report
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			t.Fatal(err)
		}
		if foreign(&r) || r.Summary.Pass != 0 || r.Summary.Fail != 1 || len(r.Results) != 1 || r.Results[0].Result != "fail" ||
			len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != "uid-1" {
			t.Errorf("the report at the object's name: labels %v source %q summary %+v results %+v owners %+v: want the audit's failing result",
				r.Labels, r.Source, r.Summary, r.Results, r.OwnerReferences)
		}
	}

	t.Run("full pass", func(t *testing.T) {
		w, dyn := newWriter()
		rc, errs := w.reconcile(ctx, ref.Namespace, map[string]*objectResults{ref.UID: results()})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if rc.replaced != 1 || rc.updated != 1 || rc.created != 0 {
			t.Errorf("counts %+v, want 1 updated, replaced", rc)
		}
		check(t, dyn)
		// A second pass finds its own report and writes nothing.
		if rc, errs := w.reconcile(ctx, ref.Namespace, map[string]*objectResults{ref.UID: results()}); len(errs) > 0 || rc.unchanged != 1 || rc.replaced != 0 {
			t.Errorf("second pass: %+v %v, want 1 unchanged", rc, errs)
		}
	})
	t.Run("incremental", func(t *testing.T) {
		w, dyn := newWriter()
		rc, err := w.reconcileOne(ctx, ref.Namespace, ref.UID, results())
		if err != nil {
			t.Fatal(err)
		}
		if rc.replaced != 1 || rc.updated != 1 {
			t.Errorf("counts %+v, want 1 updated, replaced", rc)
		}
		check(t, dyn)
	})
	t.Run("not the audit's to delete", func(t *testing.T) {
		w, dyn := newWriter()
		if _, err := w.reconcileOne(ctx, ref.Namespace, ref.UID, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(gvr).Namespace(ref.Namespace).Get(ctx, ref.UID, metav1.GetOptions{}); err != nil {
			t.Errorf("the audit deleted a report it did not write, for an object it does not audit: %v", err)
		}
	})
}
