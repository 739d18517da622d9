package audit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// policyGVRs are the four policy kinds, watched in incremental mode.
var policyGVRs = []schema.GroupVersionResource{
	v1.GroupVersion.WithResource("clusteradmissionpolicies"),
	v1.GroupVersion.WithResource("admissionpolicies"),
	v1.GroupVersion.WithResource("clusteradmissionpolicygroups"),
	v1.GroupVersion.WithResource("admissionpolicygroups"),
}

// restartDelay is how long a policy change is left to settle before the full re-audit, and
// the pause after a pass that could not start.
const restartDelay = time.Second

// Watch is the incremental mode: a full pass (as Run), then watches on the audited kinds and the
// policies. An object created or changed is audited at once and its report written; one deleted
// loses its report. A policy created, edited (a new generation), deleted or changing status
// starts a new full pass with the new policy set, and so does a watch that cannot resume (its
// resource version expired). onPass sees each full pass's summary and error. It returns when ctx
// ends.
func Watch(ctx context.Context, cfg *rest.Config, o Options, onPass func(*Summary, error)) error {
	o.defaults()
	for ctx.Err() == nil {
		a, done, err := prepare(ctx, cfg, &o)
		if err == nil {
			// the watches start where the cluster was before the pass listed it, so that
			// nothing changed during the pass is missed (seen twice is harmless)
			if err = a.resourceVersions(ctx); err == nil {
				err = a.full(ctx)
			}
		}
		onPass(a.s, err)
		if a.c == nil || a.ev == nil { // could not start: try again
			if done != nil {
				done()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * restartDelay):
			}
			continue
		}
		reason := a.follow(ctx)
		if done != nil {
			done()
		}
		if ctx.Err() == nil {
			o.Logger.Info("incremental audit: starting a full pass", "reason", reason)
			select {
			case <-ctx.Done():
			case <-time.After(restartDelay):
			}
		}
	}
	return nil
}

// follow watches until a full pass is needed (it says why) or ctx ends.
func (a *auditor) follow(ctx context.Context) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	restart := make(chan string, 1)
	need := func(why string) {
		select {
		case restart <- why:
		default:
		}
	}
	var wg sync.WaitGroup
	known := map[uidKey]policyState{}
	for _, p := range a.policiesAll() {
		st := p.PolicyStatus()
		sig := ""
		for _, c := range st.Conditions {
			sig += c.Type + "=" + string(c.Status) + "/" + c.Reason + ";"
		}
		known[uidKey(p.GetUID())] = policyState{p.GetGeneration(), string(st.PolicyStatus) + "|" + sig}
	}
	var mu sync.Mutex
	for _, gvr := range policyGVRs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.watch(ctx, gvr, func(ev watch.Event) {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					return
				}
				gen := u.GetGeneration()
				st, _, _ := unstructured.NestedString(u.Object, "status", "policyStatus")
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				sig := ""
				for _, c := range conds {
					m, _ := c.(map[string]any)
					sig += fmt.Sprintf("%v=%v/%v;", m["type"], m["status"], m["reason"])
				}
				state := policyState{gen, st + "|" + sig}
				mu.Lock()
				prev, seen := known[uidKey(u.GetUID())]
				known[uidKey(u.GetUID())] = state
				mu.Unlock()
				if ev.Type == watch.Deleted || !seen || prev != state {
					need(fmt.Sprintf("%s %s %s", ev.Type, u.GetKind(), u.GetName()))
				}
			})
			if err != nil && ctx.Err() == nil {
				need(err.Error())
			}
		}()
	}
	var targets []target
	for _, p := range a.policies {
		for _, t := range p.rules {
			if !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
	}
	sem := make(chan struct{}, max(a.o.ParallelResources, 1))
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.watch(ctx, t.gvr, func(ev watch.Event) {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					return
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					a.one(ctx, t, ev.Type, u)
				}()
			})
			if err != nil && ctx.Err() == nil {
				need(err.Error())
			}
		}()
	}
	var why string
	select {
	case <-ctx.Done():
	case why = <-restart:
	}
	cancel()
	wg.Wait()
	return why
}

// uidKey is a policy's UID.
type uidKey string

// policyState is what of a policy starts a new pass when it changes: its spec (generation), its
// policyStatus and its conditions (a server that now serves the edit turns
// PolicyServerConfigurationUpToDate back to True, so a pass started before the reload is
// followed by one after it).
type policyState struct {
	generation int64
	status     string
}

// policiesAll are the policy objects the pass read (audited or not), for change detection.
func (a *auditor) policiesAll() []v1.Policy {
	var out []v1.Policy
	for _, p := range a.policies {
		out = append(out, p.Object)
	}
	return out
}

// resourceVersions records, before a full pass, the resource version each watched resource
// (the policy kinds and the audited kinds) is at.
func (a *auditor) resourceVersions(ctx context.Context) error {
	a.rvs = map[schema.GroupVersionResource]string{}
	gvrs := slices.Clone(policyGVRs)
	for _, p := range a.policies {
		for _, t := range p.rules {
			if !slices.Contains(gvrs, t.gvr) {
				gvrs = append(gvrs, t.gvr)
			}
		}
	}
	for _, gvr := range gvrs {
		l, err := a.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return fmt.Errorf("watching %s: %w", gvrString(gvr), err)
		}
		a.rvs[gvr] = l.GetResourceVersion()
	}
	return nil
}

// watch follows gvr cluster-wide from the resource version recorded before the pass; it returns
// when ctx ends or the watch cannot resume.
func (a *auditor) watch(ctx context.Context, gvr schema.GroupVersionResource, fn func(watch.Event)) error {
	ri := a.dyn.Resource(gvr)
	rv, ok := a.rvs[gvr]
	if !ok {
		return fmt.Errorf("watching %s: no resource version recorded", gvrString(gvr))
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, opts)
		},
	})
	if err != nil {
		return fmt.Errorf("watching %s: %w", gvrString(gvr), err)
	}
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rw.Done():
			return fmt.Errorf("the watch of %s ended (its resource version expired)", gvrString(gvr))
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return fmt.Errorf("the watch of %s ended", gvrString(gvr))
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("the watch of %s failed: %v", gvrString(gvr), ev.Object)
			}
			fn(ev)
		}
	}
}

// one audits one object that was created, changed or deleted, and writes its report.
func (a *auditor) one(ctx context.Context, t target, typ watch.EventType, u *unstructured.Unstructured) {
	ns := u.GetNamespace()
	if ns == a.o.Namespace && ns != "" || slices.Contains(a.o.IgnoreNamespaces, ns) ||
		a.o.OnlyNamespace != "" && ns != a.o.OnlyNamespace || a.o.ClusterOnly && ns != "" {
		return
	}
	uid := string(u.GetUID())
	if typ == watch.Deleted {
		if a.reports != nil {
			if _, err := a.reports.reconcileOne(ctx, ns, uid, nil); err != nil {
				a.o.Logger.Warn("incremental audit: deleting a report", "error", err)
			}
		}
		return
	}
	var nsLabels map[string]string
	if t.namespaced {
		var n corev1.Namespace
		if err := a.c.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			a.o.Logger.Warn("incremental audit: reading the object's namespace", "namespace", ns, "error", err)
			return
		}
		nsLabels = n.Labels
		if nsLabels == nil {
			nsLabels = map[string]string{}
		}
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return
	}
	it := item{raw: raw, name: u.GetName(), namespace: ns, uid: uid, rv: u.GetResourceVersion(), labels: u.GetLabels()}
	var matched []*Policy
	for _, p := range a.policies {
		if p.Object.IsNamespaced() && p.Object.GetNamespace() != ns {
			continue
		}
		if ok, err := p.matches(t, nsLabels, it.labels); ok && err == nil {
			matched = append(matched, p)
		}
	}
	var o *objectResults
	if len(matched) > 0 {
		res := a.evaluate(ctx, t, it, matched)
		o = &objectResults{ref: res[0].Object, results: res}
	}
	if a.reports == nil {
		return
	}
	rc, err := a.reports.reconcileOne(ctx, ns, uid, o)
	if err != nil {
		a.o.Logger.Warn("incremental audit: writing a report", "object", it.name, "namespace", ns, "error", err)
		return
	}
	a.o.Logger.Debug("incremental audit", "object", it.name, "namespace", ns, "event", typ, "created", rc.created, "updated", rc.updated, "deleted", rc.deleted)
}
