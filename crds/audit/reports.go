package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"

	orv1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Report labels.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "tollgate"
	// ResultSource is every result's source (and the report's).
	ResultSource = "tollgate"
)

// reportAPI is the group, version and resources of one report kind.
type reportAPI struct {
	gv                      schema.GroupVersion
	kind, clusterKind       string
	resource, clusterPlural string
}

func reportAPIFor(kind string) (reportAPI, error) {
	switch kind {
	case ReportOpenReports:
		return reportAPI{gv: orv1.SchemeGroupVersion, kind: "Report", clusterKind: "ClusterReport", resource: "reports", clusterPlural: "clusterreports"}, nil
	case ReportPolicyReport:
		return reportAPI{gv: schema.GroupVersion{Group: "wgpolicyk8s.io", Version: "v1beta1"}, kind: "PolicyReport", clusterKind: "ClusterPolicyReport", resource: "policyreports", clusterPlural: "clusterpolicyreports"}, nil
	}
	return reportAPI{}, fmt.Errorf("report kind %q: want %s or %s", kind, ReportOpenReports, ReportPolicyReport)
}

func (a reportAPI) gvr(namespaced bool) schema.GroupVersionResource {
	if namespaced {
		return a.gv.WithResource(a.resource)
	}
	return a.gv.WithResource(a.clusterPlural)
}

// objectResults are the results of one audited object.
type objectResults struct {
	ref     ObjectRef
	results []Result
}

// reportWriter builds reports and reconciles them with what the cluster has.
type reportWriter struct {
	dyn      dynamic.Interface
	api      reportAPI
	policies map[string]*Policy
	skipped  int
	parallel int
	log      *slog.Logger
}

// build is the report of one object (one per audited object, named by its UID and owned by it,
// as Kubewarden's): results sorted by policy, timestamps kept from prev for results that did
// not change, so that an unchanged object's report is not rewritten.
func (w *reportWriter) build(o *objectResults, namespace string, prev *orv1.Report) *orv1.Report {
	kind := w.api.kind
	if namespace == "" {
		kind = w.api.clusterKind
	}
	r := &orv1.Report{
		TypeMeta: metav1.TypeMeta{APIVersion: w.api.gv.String(), Kind: kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: o.ref.UID, Namespace: namespace,
			Labels:          map[string]string{LabelManagedBy: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: o.ref.APIVersion, Kind: o.ref.Kind, Name: o.ref.Name, UID: types.UID(o.ref.UID)}},
		},
		Source: ResultSource,
		Scope: &corev1.ObjectReference{APIVersion: o.ref.APIVersion, Kind: o.ref.Kind, Namespace: o.ref.Namespace,
			Name: o.ref.Name, UID: types.UID(o.ref.UID), ResourceVersion: o.ref.ResourceVersion},
	}
	old := map[string]orv1.ReportResult{}
	if prev != nil {
		for _, x := range prev.Results {
			old[x.Policy] = x
		}
	}
	sort.Slice(o.results, func(i, j int) bool { return o.results[i].Policy < o.results[j].Policy })
	for _, res := range o.results {
		p := w.policies[res.Policy]
		rr := orv1.ReportResult{
			Source: ResultSource, Policy: res.Policy, Category: res.Category, Severity: orv1.ResultSeverity(res.Severity),
			Timestamp: metav1.Timestamp{Seconds: res.Time.Unix()}, Result: orv1.Result(res.Outcome), Scored: true,
			ResourceSelector: &metav1.LabelSelector{}, Description: res.Message, Properties: properties(p),
		}
		if x, ok := old[res.Policy]; ok && x.Result == rr.Result && x.Description == rr.Description {
			rr.Timestamp = x.Timestamp
		}
		r.Results = append(r.Results, rr)
		switch res.Outcome {
		case Pass:
			r.Summary.Pass++
		case Fail:
			r.Summary.Fail++
		case Error:
			r.Summary.Error++
		}
	}
	r.Summary.Skip = w.skipped
	return r
}

// properties of every result of p (Kubewarden's keys; policy-generation in place of
// policy-resource-version, which changes with every status write and would rewrite every report).
func properties(p *Policy) map[string]string {
	if p == nil {
		return nil
	}
	props := map[string]string{
		"policy-name":       p.Object.GetName(),
		"policy-uid":        string(p.Object.GetUID()),
		"policy-generation": strconv.FormatInt(p.Object.GetGeneration(), 10),
	}
	if ns := p.Object.GetNamespace(); ns != "" {
		props["policy-namespace"] = ns
	}
	if p.Object.IsMutating() {
		props["mutating"] = "true"
	} else {
		props["validating"] = "true"
	}
	return props
}

// sameReport compares what the audit owns of two reports.
func sameReport(a, b *orv1.Report) bool {
	return a.Labels[LabelManagedBy] == b.Labels[LabelManagedBy] && a.Source == b.Source &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) &&
		equality.Semantic.DeepEqual(a.Scope, b.Scope) && a.Summary == b.Summary &&
		equality.Semantic.DeepEqual(a.Results, b.Results)
}

// reconcileCounts: replaced counts the reports written over a report the audit did not write
// (also counted as updated).
type reconcileCounts struct{ created, updated, deleted, unchanged, replaced int }

// errForeign: a report of that name exists and was not written by the audit (no
// app.kubernetes.io/managed-by=tollgate label).
var errForeign = errors.New("a report the audit did not write holds the name")

// foreign reports whether r was not written by the audit. The name of an audited object's
// report is the audit's: a report there that it did not write (one a tenant created for its own
// object before the audit ran, with a passing result) is never trusted nor left in place, but
// replaced by the audit's.
func foreign(r *orv1.Report) bool {
	return r.Labels[LabelManagedBy] != ManagedBy || r.Source != ResultSource
}

// reconcile makes the reports of namespace ("" for cluster-scoped) be exactly one per object
// of objs: creates the missing, updates the changed, deletes the ones of objects that are gone
// or have no result any more. It returns the counts and the write failures.
func (w *reportWriter) reconcile(ctx context.Context, namespace string, objs map[string]*objectResults) (reconcileCounts, []error) {
	var rc reconcileCounts
	ri := w.dyn.Resource(w.api.gvr(namespace != ""))
	var res dynamic.ResourceInterface = ri
	if namespace != "" {
		res = ri.Namespace(namespace)
	}
	existing := map[string]*orv1.Report{}
	rvs := map[string]string{}
	cont := ""
	for {
		l, err := res.List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy, Limit: 500, Continue: cont})
		if err != nil {
			if apierrors.IsNotFound(err) {
				err = fmt.Errorf("the %s API is not installed (install the report CRDs: the chart's audit.installReportCRDs, or crds/reports/): %w", w.api.gv.WithResource(w.api.gvr(namespace != "").Resource).String(), err)
			}
			return rc, []error{fmt.Errorf("listing reports%s: %w", inNamespace(namespace), err)}
		}
		for i := range l.Items {
			var r orv1.Report
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &r); err != nil {
				return rc, []error{fmt.Errorf("report %s%s: %w", l.Items[i].GetName(), inNamespace(namespace), err)}
			}
			existing[r.Name] = &r
			rvs[r.Name] = r.ResourceVersion
		}
		if cont = l.GetContinue(); cont == "" {
			break
		}
	}
	type op struct {
		name   string
		report *orv1.Report // nil: delete
		create bool
	}
	var ops []op
	for uid, o := range objs {
		prev := existing[uid]
		r := w.build(o, namespace, prev)
		switch {
		case prev == nil:
			ops = append(ops, op{uid, r, true})
		case sameReport(prev, r):
			rc.unchanged++
		default:
			r.ResourceVersion = rvs[uid]
			ops = append(ops, op{uid, r, false})
		}
	}
	for name := range existing {
		if _, ok := objs[name]; !ok {
			ops = append(ops, op{name: name})
		}
	}
	var mu sync.Mutex
	var errs []error
	parallel(w.parallel, len(ops), func(i int) {
		o := ops[i]
		err := w.write(ctx, res, o.name, o.report, o.create)
		replaced := false
		if errors.Is(err, errForeign) {
			// The list sees only the audit's reports: another one holds the name.
			err, replaced = w.takeOver(ctx, res, o.name, o.report), true
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			errs = append(errs, err)
		case replaced:
			rc.updated++
			rc.replaced++
		case o.report == nil:
			rc.deleted++
		case o.create:
			rc.created++
		default:
			rc.updated++
		}
	})
	return rc, errs
}

func (w *reportWriter) write(ctx context.Context, res dynamic.ResourceInterface, name string, r *orv1.Report, create bool) error {
	if r == nil {
		err := res.Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting report %s: %w", name, err)
		}
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	if create {
		_, err = res.Create(ctx, u, metav1.CreateOptions{FieldManager: "tollgate-audit"})
		if apierrors.IsAlreadyExists(err) {
			// Another run wrote it meanwhile (the next run compares it), or a report the
			// audit did not write holds the name: the caller takes it over.
			return errForeign
		}
	} else {
		_, err = res.Update(ctx, u, metav1.UpdateOptions{FieldManager: "tollgate-audit"})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // deleted with its object, or changed meanwhile: the next run sees it
		}
	}
	if err != nil {
		verb := "updating"
		if create {
			verb = "creating"
		}
		return fmt.Errorf("%s report %s%s (%s): %w", verb, name, inNamespace(r.Namespace), r.Scope.Kind+" "+r.Scope.Name, err)
	}
	return nil
}

// takeOver writes r over the report that holds its name, whoever wrote it, and logs a report
// the audit did not write. A report the audit wrote meanwhile (another run) is left to the
// next run.
func (w *reportWriter) takeOver(ctx context.Context, res dynamic.ResourceInterface, name string, r *orv1.Report) error {
	u, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return w.write(ctx, res, name, r, true)
	}
	if err != nil {
		return fmt.Errorf("reading report %s%s: %w", name, inNamespace(r.Namespace), err)
	}
	var prev orv1.Report
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &prev); err != nil {
		return fmt.Errorf("report %s%s: %w", name, inNamespace(r.Namespace), err)
	}
	if !foreign(&prev) {
		return nil
	}
	w.warnForeign(&prev, r)
	r.ResourceVersion = prev.ResourceVersion
	return w.write(ctx, res, name, r, false)
}

// warnForeign logs that the audit replaces a report it did not write.
func (w *reportWriter) warnForeign(prev, r *orv1.Report) {
	if w.log == nil {
		return
	}
	w.log.Warn("replacing a report the audit did not write, at the name of an audited object's report",
		"report", prev.Name, "namespace", prev.Namespace, "object", r.Scope.Kind+" "+r.Scope.Name,
		"managedBy", prev.Labels[LabelManagedBy], "source", prev.Source,
		"pass", prev.Summary.Pass, "fail", prev.Summary.Fail)
}

// reconcileOne brings the report of one object up to date (incremental mode): o nil deletes it
// (the object is gone, or no audited policy matches it any more).
func (w *reportWriter) reconcileOne(ctx context.Context, namespace, uid string, o *objectResults) (reconcileCounts, error) {
	var rc reconcileCounts
	var res dynamic.ResourceInterface = w.dyn.Resource(w.api.gvr(namespace != ""))
	if namespace != "" {
		res = w.dyn.Resource(w.api.gvr(true)).Namespace(namespace)
	}
	var prev *orv1.Report
	u, err := res.Get(ctx, uid, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return rc, fmt.Errorf("reading report %s%s: %w", uid, inNamespace(namespace), err)
	default:
		prev = &orv1.Report{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, prev); err != nil {
			return rc, fmt.Errorf("report %s%s: %w", uid, inNamespace(namespace), err)
		}
	}
	if o == nil {
		if prev == nil || foreign(prev) {
			return rc, nil // nothing audited: a report the audit did not write is not its to delete
		}
		rc.deleted++
		return rc, w.write(ctx, res, uid, nil, false)
	}
	if prev != nil && foreign(prev) {
		// Never trusted: its results and timestamps are not kept.
		r := w.build(o, namespace, nil)
		w.warnForeign(prev, r)
		r.ResourceVersion = prev.ResourceVersion
		rc.updated++
		rc.replaced++
		return rc, w.write(ctx, res, uid, r, false)
	}
	r := w.build(o, namespace, prev)
	switch {
	case prev == nil:
		rc.created++
		return rc, w.write(ctx, res, uid, r, true)
	case sameReport(prev, r):
		rc.unchanged++
		return rc, nil
	}
	r.ResourceVersion = prev.ResourceVersion
	rc.updated++
	return rc, w.write(ctx, res, uid, r, false)
}
