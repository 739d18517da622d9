package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// Run audits the cluster of cfg once: see the package documentation. It returns what it did;
// the error says which of its own steps failed (a list or a report write): evaluations that
// failed are results, not errors.
func Run(ctx context.Context, cfg *rest.Config, o Options) (*Summary, error) {
	o.defaults()
	a, done, err := prepare(ctx, cfg, &o)
	if done != nil {
		defer done()
	}
	if err != nil {
		return a.s, err
	}
	return a.s, a.full(ctx)
}

// prepare makes the clients, reads and selects the policies and makes the evaluator; done
// releases the evaluator's connections.
func prepare(ctx context.Context, cfg *rest.Config, o *Options) (a *auditor, done func(), err error) {
	s := &Summary{RunID: uuid.NewString()}
	a = &auditor{o: o, s: s, start: time.Now()}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	api, err := reportAPIFor(o.ReportKind)
	if err != nil {
		return a, nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return a, nil, err
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return a, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return a, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return a, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc, err := rawClient(cfg)
	if err != nil {
		return a, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	a.c, a.dyn = c, dyn

	explicit := o.Policies != nil
	all := o.Policies
	if !explicit {
		objs, err := ListPolicies(ctx, c)
		if err != nil {
			return a, nil, err
		}
		for _, p := range objs {
			all = append(all, NewPolicy(p))
		}
	}
	policies := selectPolicies(all, explicit, c.RESTMapper(), s)
	for _, p := range policies {
		s.Audited = append(s.Audited, p.ID)
	}
	for _, n := range s.Skipped {
		o.Logger.Info("policy skipped", "policy", n.Policy, "reason", n.Reason)
	}
	for _, n := range s.Errored {
		o.Logger.Warn("policy not audited", "policy", n.Policy, "reason", n.Reason)
	}
	for _, n := range s.Warnings {
		o.Logger.Warn("policy warning", "policy", n.Policy, "warning", n.Reason)
	}

	if !explicit {
		if err := loadWebhooks(ctx, c, policies); err != nil {
			return a, nil, err
		}
	}
	ev := o.Evaluator
	if ev == nil {
		se, err := newServerEvaluator(c, o.Namespace, o.Server, policies)
		if err != nil {
			return a, nil, err
		}
		done = se.close
		ev = se
	}
	a.ev, a.lister, a.policies = ev, &lister{rc: rc, pageSize: o.PageSize, log: o.Logger}, policies
	if !o.NoReports {
		byID := map[string]*Policy{}
		for _, p := range policies {
			byID[p.ID] = p
		}
		a.reports = &reportWriter{dyn: dyn, api: api, policies: byID, skipped: len(s.Skipped), parallel: min(o.ParallelResources, 20), log: o.Logger}
	}
	return a, done, nil
}

// full is one complete pass: the cluster-scoped objects, then every namespace (Kubewarden's
// order).
func (a *auditor) full(ctx context.Context) (err error) {
	o, s := a.o, a.s
	if o.Tracer != nil {
		var span trace.Span
		ctx, span = o.Tracer.Start(ctx, "audit", trace.WithAttributes(attribute.String("tollgate.audit.run_id", s.RunID)))
		defer func() {
			span.SetAttributes(attribute.Int("tollgate.audit.policies", len(a.policies)), attribute.Int("tollgate.audit.listed", s.Listed),
				attribute.Int("tollgate.audit.evaluated", s.Evaluated), attribute.Int("tollgate.audit.failures", len(s.Failures)))
			if err != nil {
				span.SetStatus(codes.Error, "")
			}
			span.End()
		}()
	}
	if o.OnlyNamespace == "" {
		a.scope(ctx, "", nil)
	}
	if !o.ClusterOnly {
		nss, err := a.namespaces(ctx, a.c)
		if err != nil {
			a.fail(err)
		}
		s.Namespaces = len(nss)
		parallel(o.ParallelNamespaces, len(nss), func(i int) { a.scope(ctx, nss[i].Name, nss[i].Labels) })
	}
	s.Duration = time.Since(a.start)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.End = a.o.Now().UTC()
	if !o.NoStatus && o.Policies == nil {
		for _, err := range writeAuditStatus(ctx, a.c, a.policies, s) {
			a.fail(err)
		}
	}
	sort.Strings(s.Failures)
	if len(s.Failures) > 0 {
		return fmt.Errorf("the audit failed %d time(s): %s", len(s.Failures), strings.Join(s.Failures, "; "))
	}
	return ctx.Err()
}

// parallel calls fn(0..n-1), at most limit at once, and returns when all have returned.
func parallel(limit, n int, fn func(i int)) {
	if n == 1 || limit == 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// rawClient is a REST client for lists read as raw JSON pages.
func rawClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{}
	c.APIPath = "/"
	c.AcceptContentTypes = "application/json"
	c.ContentType = "application/json"
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: clientgoscheme.Codecs}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

type auditor struct {
	o        *Options
	s        *Summary
	start    time.Time
	c        client.Client
	dyn      dynamic.Interface
	rvs      map[schema.GroupVersionResource]string // incremental mode: where the watches start
	ev       Evaluator
	lister   *lister
	reports  *reportWriter
	policies []*Policy

	mu sync.Mutex // s
}

func (a *auditor) fail(err error) {
	if errors.Is(err, context.Canceled) || strings.Contains(err.Error(), context.Canceled.Error()) {
		return // the run was stopped: Run returns ctx's error
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.s.Failures = append(a.s.Failures, err.Error())
	a.o.Logger.Error("audit step failed", "error", err)
}

type nsInfo struct {
	Name   string
	Labels map[string]string
}

// namespaces to audit: all but tollgate's and the ignored ones (or the one asked for).
func (a *auditor) namespaces(ctx context.Context, c client.Reader) ([]nsInfo, error) {
	var out []nsInfo
	if a.o.OnlyNamespace != "" {
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: a.o.OnlyNamespace}, &ns); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", a.o.OnlyNamespace, err)
		}
		return []nsInfo{{ns.Name, ns.Labels}}, nil
	}
	var l corev1.NamespaceList
	if err := c.List(ctx, &l); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	for _, ns := range l.Items {
		if ns.Name == a.o.Namespace || slices.Contains(a.o.IgnoreNamespaces, ns.Name) || ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		out = append(out, nsInfo{ns.Name, ns.Labels})
	}
	return out, nil
}

// scope audits the cluster-scoped objects (namespace "") or one namespace and reconciles its
// reports. A failed list leaves the scope's reports as they are (nothing is deleted on a
// partial view).
func (a *auditor) scope(ctx context.Context, namespace string, nsLabels map[string]string) {
	if a.o.Tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		var span trace.Span
		name := "audit namespace " + namespace
		if namespace == "" {
			name = "audit cluster-scoped"
		}
		ctx, span = a.o.Tracer.Start(ctx, name, trace.WithAttributes(attribute.String("tollgate.audit.namespace", namespace)))
		defer span.End()
	}
	var ps []*Policy
	var targets []target
	for _, p := range a.policies {
		if namespace != "" && p.Object.IsNamespaced() && p.Object.GetNamespace() != namespace {
			continue
		}
		for _, t := range p.rules {
			if t.namespaced == (namespace != "") && !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
		ps = append(ps, p)
	}
	objs := map[string]*objectResults{}
	var mu sync.Mutex
	failed := false
	for _, t := range targets {
		var wg sync.WaitGroup
		sem := make(chan struct{}, a.o.ParallelResources)
		err := a.lister.each(ctx, t, namespace, func(it item) error {
			a.count(func(s *Summary) { s.Listed++ })
			var matched []*Policy
			for _, p := range ps {
				ok, err := p.matches(t, nsLabels, it.labels)
				if err != nil {
					return fmt.Errorf("policy %s: selector: %w", p.ID, err)
				}
				if ok {
					matched = append(matched, p)
				}
			}
			if len(matched) == 0 {
				return nil
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				res := a.evaluate(ctx, t, it, matched)
				mu.Lock()
				defer mu.Unlock()
				o := objs[it.uid]
				if o == nil {
					o = &objectResults{ref: res[0].Object}
					objs[it.uid] = o
				}
				o.results = append(o.results, res...)
			}()
			return ctx.Err()
		})
		wg.Wait()
		if err != nil {
			a.fail(err)
			failed = true
		}
	}
	if failed || a.reports == nil || ctx.Err() != nil {
		return
	}
	rc, errs := a.reports.reconcile(ctx, namespace, objs)
	for _, err := range errs {
		a.fail(err)
	}
	a.count(func(s *Summary) {
		s.Created += rc.created
		s.Updated += rc.updated
		s.Deleted += rc.deleted
		s.Unchanged += rc.unchanged
		s.Replaced += rc.replaced
	})
}

func (a *auditor) count(f func(*Summary)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a.s)
}

// evaluate runs the matched policies on one object, ParallelPolicies at a time.
func (a *auditor) evaluate(ctx context.Context, t target, it item, matched []*Policy) []Result {
	ref := ObjectRef{APIVersion: t.gvr.GroupVersion().String(), Kind: t.kind, Namespace: it.namespace, Name: it.name, UID: it.uid, ResourceVersion: it.rv}
	review := buildReview(t, it)
	out := make([]Result, len(matched))
	parallel(a.o.ParallelPolicies, len(matched), func(i int) {
		p := matched[i]
		v := a.ev.Evaluate(ctx, p, review)
		if v.Outcome != Pass && v.Outcome != Fail && v.Outcome != Error {
			v = Verdict{Error, fmt.Sprintf("the evaluator answered %q", v.Outcome)}
		}
		out[i] = Result{Policy: p.ID, Object: ref, Outcome: v.Outcome, Message: v.Message, Severity: p.severity, Category: p.category, Time: a.o.Now().UTC().Truncate(time.Second)}
		if a.o.OnResult != nil {
			a.o.OnResult(out[i])
		}
	})
	a.count(func(s *Summary) {
		s.Evaluated++
		if s.ByPolicy == nil {
			s.ByPolicy = map[string]*Counts{}
		}
		for _, r := range out {
			pc := s.ByPolicy[r.Policy]
			if pc == nil {
				pc = &Counts{}
				s.ByPolicy[r.Policy] = pc
			}
			switch r.Outcome {
			case Pass:
				s.Pass++
				pc.Pass++
			case Fail:
				s.Fail++
				pc.Fail++
			default:
				s.Error++
				pc.Error++
			}
		}
	})
	return out
}

// buildReview is the synthetic CREATE request for an existing object (Kubewarden's, except
// that resource names the plural resource, as the apiserver sends it, where Kubewarden's
// scanner sends the Kind): uid the object's, empty userInfo, no oldObject.
func buildReview(t target, it item) []byte {
	type gvk struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	}
	type gvr struct {
		Group    string `json:"group"`
		Version  string `json:"version"`
		Resource string `json:"resource"`
	}
	k := gvk{t.gvr.Group, t.gvr.Version, t.kind}
	r := gvr{t.gvr.Group, t.gvr.Version, t.gvr.Resource}
	req := struct {
		UID             string          `json:"uid"`
		Kind            gvk             `json:"kind"`
		Resource        gvr             `json:"resource"`
		RequestKind     gvk             `json:"requestKind"`
		RequestResource gvr             `json:"requestResource"`
		Name            string          `json:"name"`
		Namespace       string          `json:"namespace,omitempty"`
		Operation       string          `json:"operation"`
		UserInfo        struct{}        `json:"userInfo"`
		Object          json.RawMessage `json:"object"`
		DryRun          bool            `json:"dryRun"`
	}{UID: it.uid, Kind: k, Resource: r, RequestKind: k, RequestResource: r, Name: it.name, Namespace: it.namespace, Operation: "CREATE", Object: it.raw}
	b, err := json.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    any    `json:"request"`
	}{"admission.k8s.io/v1", "AdmissionReview", req})
	if err != nil {
		// it.raw came from the apiserver as JSON; only a bug gets here
		panic(errors.Join(errors.New("audit: encoding a review"), err))
	}
	return b
}
