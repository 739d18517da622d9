package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

const testNS = "tollgate"

// fakeServer stands in for the probe port of one policy server replica.
type fakeServer struct {
	*httptest.Server
	mu   sync.Mutex
	body status.Policies
	hits atomic.Int64
}

func newFakeServer(t testing.TB) *fakeServer {
	s := &fakeServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/policies" {
			http.NotFound(w, r)
			return
		}
		s.hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(&s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// serve makes the server report configuration digest with the given policies.
func (s *fakeServer) serve(digest string, pols ...status.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = status.Policies{
		ConfigDigest: digest,
		LastReload:   status.Reload{OK: true, Trigger: "file", Digest: digest},
		Policies:     pols,
	}
}

func (s *fakeServer) hostPort(t testing.TB) (string, int32) {
	host, port, err := net.SplitHostPort(s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}

func ready(id string) status.Policy {
	return status.Policy{ID: id, Kind: status.KindPolicy, Mode: "protect", State: status.StateReady}
}

// testBuild stands in for BuildPolicyEntry: the entry changes with the policy's generation, and
// a policy annotated test/invalid is refused with the annotation's value.
func testBuild(p v1.Policy, _ *v1.PolicyServer, _ Options) (string, config.Entry, error) {
	id := v1.PolicyID(p.PolicyKind(), p.GetNamespace(), p.GetName())
	if msg := p.GetAnnotations()["test/invalid"]; msg != "" {
		return id, config.Entry{}, errors.New(msg)
	}
	mutating := p.IsMutating()
	return id, config.Entry{
		NamespacedName:  &config.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()},
		Module:          "registry://example/policy:v1",
		Settings:        json.RawMessage(fmt.Sprintf(`{"generation":%d}`, p.GetGeneration())),
		AllowedToMutate: &mutating,
	}, nil
}

type fakeCA struct {
	mu     sync.Mutex
	bundle []byte
}

func (f *fakeCA) CABundle(context.Context) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.bundle...), nil
}

// env is a fake cluster with one PolicyServer "default", its replicas and the four reconcilers.
type env struct {
	t       testing.TB
	ctx     context.Context
	c       client.Client
	rs      map[string]*policyReconciler
	rec     *record.FakeRecorder
	ca      *fakeCA
	writes  atomic.Int64
	servers []*fakeServer
	// failWebhook, when set, fails webhook configuration creates and updates.
	failWebhook atomic.Pointer[apierrors.StatusError]
}

func newEnv(t testing.TB, objs ...client.Object) *env {
	e := &env{t: t, ctx: context.Background(), rec: record.NewFakeRecorder(100), ca: &fakeCA{bundle: []byte("CA1")}}
	count := func() { e.writes.Add(1) }
	webhookErr := func(obj client.Object) error {
		switch obj.(type) {
		case *admv1.ValidatingWebhookConfiguration, *admv1.MutatingWebhookConfiguration:
			if err := e.failWebhook.Load(); err != nil {
				return err
			}
		}
		return nil
	}
	e.c = fake.NewClientBuilder().
		WithScheme(Scheme()).
		WithObjects(objs...).
		WithStatusSubresource(&v1.ClusterAdmissionPolicy{}, &v1.AdmissionPolicy{}, &v1.ClusterAdmissionPolicyGroup{}, &v1.AdmissionPolicyGroup{}, &v1.PolicyServer{}).
		WithReturnManagedFields().
		WithInterceptorFuncs(interceptor.Funcs{
			Apply: func(ctx context.Context, c client.WithWatch, obj apiruntime.ApplyConfiguration, opts ...client.ApplyOption) error {
				count()
				if kind, _ := applyKindName(obj); strings.HasSuffix(kind, "WebhookConfiguration") {
					if err := e.failWebhook.Load(); err != nil {
						return err
					}
				}
				return c.Apply(ctx, obj, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				count()
				if err := webhookErr(obj); err != nil {
					return err
				}
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				count()
				if err := webhookErr(obj); err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				count()
				return c.Delete(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				count()
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				count()
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				count()
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).
		Build()
	o, err := Options{Namespace: testNS}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	e.rs = map[string]*policyReconciler{}
	for _, r := range newPolicyReconcilers(e.c, e.c, o, e.ca, testBuild, e.rec) {
		r.statuses.ttl = 0 // every reconcile asks
		e.rs[r.kind] = r
	}
	return e
}

// addServer starts a replica of PolicyServer ps and publishes it in an EndpointSlice.
func (e *env) addServer(ps string) *fakeServer {
	s := newFakeServer(e.t)
	host, port := s.hostPort(e.t)
	e.servers = append(e.servers, s)
	name := v1.ServicePortReadiness
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS,
			Name:      v1.PolicyServerObjectName(ps) + "-" + strconv.Itoa(len(e.servers)),
			Labels:    map[string]string{discoveryv1.LabelServiceName: v1.PolicyServerObjectName(ps)},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	if err := e.c.Create(e.ctx, sl); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// writeConfig writes ps's ConfigMap with the entries of policies and returns its digest.
func (e *env) writeConfig(ps string, policies ...v1.Policy) string {
	e.t.Helper()
	doc := map[string]config.Entry{}
	for _, p := range policies {
		if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(p), p); err != nil {
			e.t.Fatal(err)
		}
		id, entry, err := testBuild(p, nil, Options{})
		if err != nil {
			continue
		}
		doc[id] = entry
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	digest := status.Digest(b)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: v1.PolicyServerObjectName(ps)}}
	err := e.c.Get(e.ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Labels = map[string]string{v1.PolicyServerLabel: ps}
	cm.Annotations = map[string]string{v1.ConfigDigestAnnotation: digest}
	cm.Data = map[string]string{v1.PoliciesKey: string(b)}
	if apierrors.IsNotFound(err) {
		err = e.c.Create(e.ctx, cm)
	} else if err == nil {
		err = e.c.Update(e.ctx, cm)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return digest
}

// reconcile reconciles p once and returns the result and p as stored.
func (e *env) reconcile(p v1.Policy) reconcile.Result {
	e.t.Helper()
	res, err := e.rs[p.PolicyKind()].Reconcile(e.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()}})
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(p), p); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return res
}

func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func policyServer(name string) *v1.PolicyServer {
	return &v1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func cap1(name string) *v1.ClusterAdmissionPolicy {
	return &v1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1.ClusterAdmissionPolicySpec{
			WebhookSpec: v1.WebhookSpec{
				PolicyServer: "default",
				Mode:         v1.ModeProtect,
				Rules: []v1.RuleWithOperations{{
					Operations: []v1.OperationType{"CREATE"}, APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
				}},
			},
			ModuleSpec: v1.ModuleSpec{Module: "registry://example/policy:v1"},
		},
	}
}

func wantStage(t *testing.T, p v1.Policy, stage v1.PolicyStatusEnum, reason string) {
	t.Helper()
	st := p.PolicyStatus()
	c := meta.FindStatusCondition(st.Conditions, v1.ConditionPolicyActive)
	if st.PolicyStatus != stage || c == nil || c.Reason != reason {
		t.Fatalf("status %q %+v, want %q with reason %s", st.PolicyStatus, c, stage, reason)
	}
	wantStatus := metav1.ConditionFalse
	if stage == v1.PolicyStatusActive {
		wantStatus = metav1.ConditionTrue
	}
	if c.Status != wantStatus {
		t.Fatalf("PolicyActive %s, want %s", c.Status, wantStatus)
	}
	if st.ObservedGeneration != p.GetGeneration() {
		t.Fatalf("observedGeneration %d, want %d", st.ObservedGeneration, p.GetGeneration())
	}
}

func wantCondition(t *testing.T, p v1.Policy, typ string, s metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(p.PolicyStatus().Conditions, typ)
	if c == nil || c.Status != s || c.Reason != reason {
		t.Fatalf("%s: %+v, want %s %s", typ, c, s, reason)
	}
}

func getValidating(e *env, id string) *admv1.ValidatingWebhookConfiguration {
	w := &admv1.ValidatingWebhookConfiguration{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: id}, w); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return w
}

func getMutating(e *env, id string) *admv1.MutatingWebhookConfiguration {
	w := &admv1.MutatingWebhookConfiguration{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: id}, w); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return w
}

// activate brings p to active on a fresh env with one replica.
func activate(t *testing.T, p v1.Policy) (*env, *fakeServer) {
	e := newEnv(t, policyServer("default"), p)
	s := e.addServer("default")
	id := v1.PolicyID(p.PolicyKind(), p.GetNamespace(), p.GetName())
	s.serve(e.writeConfig("default", p), ready(id))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	e.events()
	return e, s
}

func TestPolicyStages(t *testing.T) {
	p := cap1("privileged")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e := newEnv(t, p)

	// No PolicyServer: unscheduled, the finalizer is added.
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusUnscheduled, ReasonPolicyServerNotFound)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionPolicyActive); !strings.Contains(c.Message, `"default"`) {
		t.Errorf("message %q does not name the server", c.Message)
	}
	if p.Status.Mode != v1.ModeUnknown {
		t.Errorf("mode %q", p.Status.Mode)
	}
	if !containsString(p.Finalizers, v1.PolicyFinalizer) {
		t.Fatalf("finalizers %v", p.Finalizers)
	}
	wantCondition(t, p, v1.ConditionConfigurationUpToDate, metav1.ConditionUnknown, ReasonUnknownConfigurationVersion)

	// The server appears, without its ConfigMap: scheduled.
	if err := e.c.Create(e.ctx, policyServer("default")); err != nil {
		t.Fatal(err)
	}
	if reqs := e.rs["ClusterAdmissionPolicy"].mapPolicyServer(e.ctx, policyServer("default")); len(reqs) != 1 || reqs[0].Name != p.Name {
		t.Fatalf("PolicyServer maps to %v", reqs)
	}
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusScheduled, ReasonConfigurationPending)

	// In the ConfigMap, no endpoint yet: pending, polled slowly (the slices are watched).
	digest := e.writeConfig("default", p)
	res := e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonNoReadyEndpoints)
	if res.RequeueAfter != 5*time.Second {
		t.Errorf("requeue after %s", res.RequeueAfter)
	}

	// One replica, still on the previous file: polled every StatusPollInterval.
	s := e.addServer("default")
	s.serve("sha256:old")
	res = e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyLoading)
	if res.RequeueAfter != 500*time.Millisecond {
		t.Errorf("requeue after %s", res.RequeueAfter)
	}
	wantCondition(t, p, v1.ConditionConfigurationUpToDate, metav1.ConditionFalse, ReasonConfigurationVersionMismatch)
	wantCondition(t, p, v1.ConditionPolicyUniquelyReachable, metav1.ConditionFalse, ReasonOlderConfigurationReachable)
	if getValidating(e, id) != nil {
		t.Fatal("webhook registered before the policy is served")
	}

	// Served: active, webhook registered.
	s.serve(digest, ready(id))
	res = e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	wantCondition(t, p, v1.ConditionConfigurationUpToDate, metav1.ConditionTrue, ReasonConfigurationVersionMatch)
	wantCondition(t, p, v1.ConditionPolicyUniquelyReachable, metav1.ConditionTrue, ReasonUniquelyReachable)
	if res.RequeueAfter != 0 {
		t.Errorf("active policy requeued after %s", res.RequeueAfter)
	}
	if p.Status.Mode != "protect" {
		t.Errorf("mode %q", p.Status.Mode)
	}
	w := getValidating(e, id)
	if w == nil || string(w.Webhooks[0].ClientConfig.CABundle) != "CA1" {
		t.Fatalf("webhook %+v", w)
	}

	// Unchanged: no write at all.
	before := e.writes.Load()
	for range 3 {
		e.reconcile(p)
	}
	if n := e.writes.Load() - before; n != 0 {
		t.Fatalf("%d writes reconciling an unchanged active policy", n)
	}
	if evs := e.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal PolicyActive") {
		t.Errorf("events %q", evs)
	}
}

func TestPolicyLoadFailedHasNoWebhook(t *testing.T) {
	p := cap1("typo")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e := newEnv(t, policyServer("default"), p)
	s := e.addServer("default")
	digest := e.writeConfig("default", p)
	s.serve(digest, status.Policy{ID: id, Kind: status.KindPolicy, Mode: "protect", State: status.StateFailed, Error: "pulling registry://exmaple/policy: no such host"})
	res := e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyLoadFailed)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionPolicyActive); !strings.Contains(c.Message, "no such host") {
		t.Errorf("message %q", c.Message)
	}
	if getValidating(e, id) != nil {
		t.Fatal("a policy that never loaded has a webhook")
	}
	if res.RequeueAfter <= 500*time.Millisecond {
		t.Errorf("failed policy polled every %s", res.RequeueAfter)
	}
	if p.Status.Mode != v1.ModeUnknown {
		t.Errorf("mode %q", p.Status.Mode)
	}
	e.reconcile(p)
	e.reconcile(p)
	if evs := e.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning PolicyLoadFailed") {
		t.Errorf("events %q, want one warning", evs)
	}
	// Another error: another event.
	s.serve(digest, status.Policy{ID: id, Kind: status.KindPolicy, State: status.StateFailed, Error: "settings rejected"})
	e.reconcile(p)
	if evs := e.events(); len(evs) != 1 || !strings.Contains(evs[0], "settings rejected") {
		t.Errorf("events %q", evs)
	}
	// The server fixed itself (retry): active.
	s.serve(digest, ready(id))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
}

func TestStaleKeepsWebhook(t *testing.T) {
	p := cap1("edited")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, s := activate(t, p)
	old := getValidating(e, id)

	p.Generation = 2
	p.Spec.Rules[0].Operations = []v1.OperationType{"CREATE", "UPDATE"}
	if err := e.c.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	// Not in the ConfigMap yet.
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusScheduled, ReasonConfigurationPending)
	if p.Status.Mode != "protect" {
		t.Errorf("mode %q while the previous version serves", p.Status.Mode)
	}
	digest := e.writeConfig("default", p)
	stale := ready(id)
	stale.Stale, stale.Error = true, "settings rejected: bad value"
	s.serve(digest, stale)
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyLoadFailed)
	w := getValidating(e, id)
	if w == nil || w.ResourceVersion != old.ResourceVersion {
		t.Fatalf("the webhook of a stale policy changed: %+v", w)
	}
	if evs := e.events(); len(evs) != 1 || !strings.Contains(evs[0], "bad value") {
		t.Errorf("events %q", evs)
	}
	// Fixed: the new rules are registered.
	s.serve(digest, ready(id))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	if w := getValidating(e, id); len(w.Webhooks[0].Rules[0].Operations) != 2 {
		t.Fatalf("rules %+v", w.Webhooks[0].Rules)
	}
}

func TestInvalidPolicy(t *testing.T) {
	p := cap1("invalid")
	p.Annotations = map[string]string{"test/invalid": "spec.settings: value <settings>: not an object"}
	e := newEnv(t, policyServer("default"), p)
	e.addServer("default")
	e.writeConfig("default")
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusScheduled, ReasonInvalidPolicy)
	e.reconcile(p)
	if evs := e.events(); len(evs) != 1 || !strings.Contains(evs[0], "not an object") {
		t.Errorf("events %q", evs)
	}
}

func TestIDCollision(t *testing.T) {
	// A ClusterAdmissionPolicy "group-x" and a ClusterAdmissionPolicyGroup "x" share an id.
	p := cap1("group-x")
	e, _ := activate(t, p)
	g := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1}}
	g.Spec.PolicyServer = "default"
	if err := e.c.Create(e.ctx, g); err != nil {
		t.Fatal(err)
	}
	e.reconcile(g)
	wantStage(t, g, v1.PolicyStatusScheduled, ReasonInvalidPolicy)
	// The group leaves the policy's webhook alone, and so does its deletion.
	if err := e.c.Delete(e.ctx, g); err != nil {
		t.Fatal(err)
	}
	e.reconcile(g)
	if getValidating(e, "clusterwide-group-x") == nil {
		t.Fatal("the group deleted the policy's webhook")
	}
}

func TestEndpoints(t *testing.T) {
	p := cap1("reach")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e := newEnv(t, policyServer("default"), p)
	a, b := e.addServer("default"), e.addServer("default")
	digest := e.writeConfig("default", p)

	// One replica serves, the other is still on the previous file.
	a.serve(digest, ready(id))
	b.serve("sha256:old", ready(id))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyLoading)
	wantCondition(t, p, v1.ConditionPolicyUniquelyReachable, metav1.ConditionFalse, ReasonOlderConfigurationReachable)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionPolicyActive); !strings.Contains(c.Message, "1 of 2") {
		t.Errorf("message %q", c.Message)
	}

	// One replica is unreachable.
	b.Close()
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonPolicyServerUnreachable)

	// Its endpoint is no longer ready: the other one decides.
	var sl discoveryv1.EndpointSlice
	if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: v1.PolicyServerObjectName("default") + "-2"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints[0].Conditions.Ready = ptr.To(false)
	if err := e.c.Update(e.ctx, &sl); err != nil {
		t.Fatal(err)
	}
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
}

func TestActiveAcrossOtherPolicyChanges(t *testing.T) {
	p := cap1("steady")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, s := activate(t, p)
	// Another policy joins the server: the ConfigMap changes, the replica has not reloaded.
	other := cap1("newcomer")
	if err := e.c.Create(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	digest := e.writeConfig("default", p, other)
	before := e.writes.Load()
	res := e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	wantCondition(t, p, v1.ConditionConfigurationUpToDate, metav1.ConditionFalse, ReasonConfigurationVersionMismatch)
	if res.RequeueAfter == 0 {
		t.Error("not requeued while the replicas catch up")
	}
	if n := e.writes.Load() - before; n != 1 {
		t.Errorf("%d writes, want 1 (the status)", n)
	}
	// The newcomer waits for the reload.
	e.reconcile(other)
	wantStage(t, other, v1.PolicyStatusPending, ReasonPolicyLoading)
	// Reloaded: both active, up to date.
	s.serve(digest, ready(id), ready(v1.PolicyID(other.PolicyKind(), "", other.Name)))
	if res = e.reconcile(p); res.RequeueAfter != 0 {
		t.Errorf("requeue after %s", res.RequeueAfter)
	}
	wantCondition(t, p, v1.ConditionConfigurationUpToDate, metav1.ConditionTrue, ReasonConfigurationVersionMatch)
	e.reconcile(other)
	wantStage(t, other, v1.PolicyStatusActive, ReasonPolicyActive)
}

func TestFinalizerDeletesWebhook(t *testing.T) {
	p := cap1("gone")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, _ := activate(t, p)
	if err := e.c.Delete(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.reconcile(p)
	if getValidating(e, id) != nil {
		t.Fatal("webhook left behind")
	}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(p), p); !apierrors.IsNotFound(err) {
		t.Fatalf("policy still there (%v): finalizers %v", err, p.Finalizers)
	}
}

func TestPolicyServerDeleted(t *testing.T) {
	p := cap1("orphan")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, _ := activate(t, p)
	ps := policyServer("default")
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(ps), ps); err != nil {
		t.Fatal(err)
	}
	ps.Finalizers = []string{v1.PolicyServerFinalizer}
	if err := e.c.Update(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusScheduled, ReasonPolicyServerDeleting)
	if getValidating(e, id) != nil {
		t.Fatal("webhook kept while the server is deleted")
	}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(ps), ps); err != nil {
		t.Fatal(err)
	}
	ps.Finalizers = nil
	if err := e.c.Update(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusUnscheduled, ReasonPolicyServerNotFound)
}

func TestMutatingFlip(t *testing.T) {
	p := cap1("flip")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, s := activate(t, p)
	p.Generation, p.Spec.Mutating = 2, true
	if err := e.c.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	s.serve(e.writeConfig("default", p), ready(id))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	if getValidating(e, id) != nil {
		t.Fatal("the validating configuration is orphaned")
	}
	m := getMutating(e, id)
	if m == nil || *m.Webhooks[0].ReinvocationPolicy != admv1.NeverReinvocationPolicy {
		t.Fatalf("mutating configuration %+v", m)
	}
}

func TestWebhookRestoredAndCARotation(t *testing.T) {
	p := cap1("restore")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, _ := activate(t, p)
	w := getValidating(e, id)

	// Edited by hand: restored.
	w.Webhooks[0].FailurePolicy = ptr.To(admv1.Ignore)
	if err := e.c.Update(e.ctx, w); err != nil {
		t.Fatal(err)
	}
	if reqs := e.rs["ClusterAdmissionPolicy"].mapWebhook(e.ctx, w); len(reqs) != 1 || reqs[0].Name != p.Name {
		t.Fatalf("webhook maps to %v", reqs)
	}
	if reqs := e.rs["ClusterAdmissionPolicyGroup"].mapWebhook(e.ctx, w); len(reqs) != 0 {
		t.Fatalf("webhook maps to a group: %v", reqs)
	}
	e.reconcile(p)
	if w = getValidating(e, id); *w.Webhooks[0].FailurePolicy != admv1.Fail {
		t.Fatal("edited webhook not restored")
	}

	// Deleted: restored.
	if err := e.c.Delete(e.ctx, w); err != nil {
		t.Fatal(err)
	}
	e.reconcile(p)
	if getValidating(e, id) == nil {
		t.Fatal("deleted webhook not restored")
	}

	// The CA rotates.
	e.ca.mu.Lock()
	e.ca.bundle = []byte("CA2+CA1")
	e.ca.mu.Unlock()
	e.reconcile(p)
	if w = getValidating(e, id); string(w.Webhooks[0].ClientConfig.CABundle) != "CA2+CA1" {
		t.Fatalf("caBundle %q", w.Webhooks[0].ClientConfig.CABundle)
	}
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
}

func TestWebhookRejected(t *testing.T) {
	p := cap1("rejected")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e := newEnv(t, policyServer("default"), p)
	s := e.addServer("default")
	s.serve(e.writeConfig("default", p), ready(id))
	e.failWebhook.Store(apierrors.NewInvalid(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}, id,
		field.ErrorList{field.Invalid(field.NewPath("webhooks").Index(0).Child("matchConditions").Index(0).Child("expression"), "x ==", "compilation failed")}))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusPending, ReasonWebhookRejected)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionPolicyActive); !strings.Contains(c.Message, "compilation failed") {
		t.Errorf("message %q", c.Message)
	}
	if evs := e.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning WebhookRejected") {
		t.Errorf("events %q", evs)
	}
	// The cache lagged behind a create: retried soon, quietly.
	e.failWebhook.Store(apierrors.NewAlreadyExists(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, id))
	if res := e.reconcile(p); res.RequeueAfter != conflictRetry {
		t.Errorf("requeue after %s", res.RequeueAfter)
	}
	e.failWebhook.Store(nil)
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
}

func TestMapFuncs(t *testing.T) {
	p := cap1("mapped")
	q := cap1("elsewhere")
	q.Spec.PolicyServer = "other"
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ns-policy"}}
	ap.Spec.PolicyServer = "default"
	e := newEnv(t, p, q, ap)
	r := e.rs["ClusterAdmissionPolicy"]
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: v1.PolicyServerObjectName("default"), Labels: map[string]string{v1.PolicyServerLabel: "default"}}}
	if reqs := r.mapConfigMap(e.ctx, cm); len(reqs) != 1 || reqs[0].Name != "mapped" {
		t.Errorf("ConfigMap maps to %v", reqs)
	}
	cm.Namespace = "elsewhere"
	if reqs := r.mapConfigMap(e.ctx, cm); len(reqs) != 0 {
		t.Errorf("a ConfigMap of another namespace maps to %v", reqs)
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "x", Labels: map[string]string{discoveryv1.LabelServiceName: v1.PolicyServerObjectName("other")}}}
	if reqs := r.mapEndpointSlice(e.ctx, sl); len(reqs) != 1 || reqs[0].Name != "elsewhere" {
		t.Errorf("EndpointSlice maps to %v", reqs)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "tollgate-ca"}}
	if reqs := r.mapCASecret(e.ctx, sec); len(reqs) != 2 {
		t.Errorf("CA Secret maps to %v", reqs)
	}
	sec.Name = "other"
	if reqs := r.mapCASecret(e.ctx, sec); len(reqs) != 0 {
		t.Errorf("another Secret maps to %v", reqs)
	}
	if reqs := e.rs["AdmissionPolicy"].mapPolicyServer(e.ctx, policyServer("default")); len(reqs) != 1 || reqs[0].Namespace != "team" {
		t.Errorf("PolicyServer maps to %v", reqs)
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// The entries BuildPolicyEntry gives are found in the policies.yml buildConfig writes.
func TestConfigHoldsBuiltEntries(t *testing.T) {
	ps := policyServer("default")
	c := cap1("settings")
	c.Spec.Settings.Raw = []byte(`{"big": 12345678901234567891, "f": 1.50, "list": [1, "a", null], "nested": {"z": 1, "a": 2}}`)
	c.Spec.ContextAwareResources = []v1.ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}
	c.Spec.TimeoutEvalSeconds = ptr.To(int32(3))
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a"}}
	ap.Spec.PolicyServer, ap.Spec.Module = "default", "ghcr.io/x/y:v1"
	g := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	g.Spec.PolicyServer, g.Spec.Expression, g.Spec.Message = "default", "a() && b()", "no"
	g.Spec.Policies = map[string]v1.ClusterPolicyGroupMember{
		"a": {ModuleSpec: v1.ModuleSpec{Module: "registry://x/a:v1"}},
		"b": {ModuleSpec: v1.ModuleSpec{Module: "registry://x/b:v1", Settings: c.Spec.Settings}},
	}
	policies := []v1.Policy{c, ap, g}
	o := Options{Namespace: testNS}
	yml, skipped := buildConfig(policies, ps, o, BuildPolicyEntry)
	if len(skipped) != 0 {
		t.Fatalf("skipped %v", skipped)
	}
	e := newEnv(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: v1.PolicyServerObjectName("default"), ResourceVersion: "7",
			Annotations: map[string]string{v1.ConfigDigestAnnotation: ConfigDigest(yml)}},
		Data: map[string]string{v1.PoliciesKey: string(yml)},
	})
	cfg, err := e.rs["ClusterAdmissionPolicy"].config(e.ctx, "default")
	if err != nil || cfg == nil || cfg.digest != ConfigDigest(yml) {
		t.Fatalf("config %+v, %v", cfg, err)
	}
	for _, p := range policies {
		id, entry, err := BuildPolicyEntry(p, ps, o)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(entry)
		if !cfg.holds(id, b) {
			t.Errorf("%s: entry %s not found in\n%s", id, b, yml)
		}
	}
	// Another big integer is another entry.
	c2 := c.DeepCopy()
	c2.Spec.Settings.Raw = []byte(`{"big": 12345678901234567892, "f": 1.50, "list": [1, "a", null], "nested": {"z": 1, "a": 2}}`)
	id, entry, _ := BuildPolicyEntry(c2, ps, o)
	if b, _ := json.Marshal(entry); cfg.holds(id, b) {
		t.Error("a changed setting is found in the old configuration")
	}
}

// The four reconcilers register with a manager (no apiserver is contacted before Start).
func TestSetupPolicyReconcilers(t *testing.T) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:  Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Controller names are unique per process: other tests may register these too.
		Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := Options{Namespace: testNS}.withDefaults()
	if err := setupPolicyReconcilersWith(mgr, o, &fakeCA{}, testBuild); err != nil {
		t.Fatal(err)
	}
}

func TestFourKindsActive(t *testing.T) {
	rules := []v1.RuleWithOperations{{Operations: []v1.OperationType{"CREATE"}, APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a", Generation: 1}}
	ap.Spec.PolicyServer, ap.Spec.Rules, ap.Spec.Mutating = "default", rules, true
	capg := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Generation: 1}}
	capg.Spec.PolicyServer, capg.Spec.Rules = "default", rules
	apg := &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "g", Generation: 1}}
	apg.Spec.PolicyServer, apg.Spec.Rules = "default", rules
	for _, p := range []v1.Policy{cap1("c"), ap, capg, apg} {
		t.Run(p.PolicyKind(), func(t *testing.T) {
			e, _ := activate(t, p)
			id := v1.PolicyID(p.PolicyKind(), p.GetNamespace(), p.GetName())
			var obj client.Object = &admv1.ValidatingWebhookConfiguration{}
			if p.IsMutating() {
				obj = &admv1.MutatingWebhookConfiguration{}
			}
			if err := e.c.Get(e.ctx, client.ObjectKey{Name: id}, obj); err != nil {
				t.Fatal(err)
			}
			if reqs := e.rs[p.PolicyKind()].mapWebhook(e.ctx, obj); len(reqs) != 1 || reqs[0].Namespace != p.GetNamespace() || reqs[0].Name != p.GetName() {
				t.Errorf("webhook maps to %v", reqs)
			}
			if err := e.c.Delete(e.ctx, p); err != nil {
				t.Fatal(err)
			}
			e.reconcile(p)
			if err := e.c.Get(e.ctx, client.ObjectKey{Name: id}, obj); !apierrors.IsNotFound(err) {
				t.Fatalf("webhook after delete: %v", err)
			}
		})
	}
}

func TestConfigurationRefused(t *testing.T) {
	p := cap1("steady")
	id := v1.PolicyID(p.PolicyKind(), "", p.Name)
	e, s := activate(t, p)
	oldDigest := s.body.ConfigDigest
	other := cap1("newcomer")
	if err := e.c.Create(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	digest := e.writeConfig("default", p, other)
	// The replica read the new file and refused it as a whole: it keeps the old one.
	s.serve(oldDigest, ready(id))
	s.mu.Lock()
	s.body.LastReload = status.Reload{OK: false, Error: "policies.yml: line 3: bad", Trigger: "file", Digest: digest}
	s.mu.Unlock()

	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionConfigurationUpToDate)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "line 3: bad") {
		t.Errorf("up to date: %+v", c)
	}
	e.reconcile(other)
	wantStage(t, other, v1.PolicyStatusPending, ReasonPolicyLoadFailed)
	if c := meta.FindStatusCondition(other.Status.Conditions, v1.ConditionPolicyActive); !strings.Contains(c.Message, "line 3: bad") {
		t.Errorf("message %q", c.Message)
	}
}

func TestPolicyServerPredicate(t *testing.T) {
	old := policyServer("default")
	old.Generation = 1
	statusOnly := old.DeepCopy()
	statusOnly.Status.ReadyReplicas = 2
	spec := old.DeepCopy()
	spec.Generation = 2
	deleting := old.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tt := range []struct {
		name string
		new  *v1.PolicyServer
		want bool
	}{{"status", statusOnly, false}, {"spec", spec, true}, {"deletion", deleting, true}} {
		if got := specOrDeletionChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tt.new}); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// BenchmarkReconcileActive is one poll of an active, unchanged policy with the real
// BuildPolicyEntry: what every policy of a server costs per status round.
func BenchmarkReconcileActive(b *testing.B) {
	p := cap1("bench")
	p.Spec.Settings.Raw = []byte(`{"mandatory_labels": ["owner", "team"]}`)
	ps := policyServer("default")
	e := newEnv(b, ps, p)
	o, _ := Options{Namespace: testNS}.withDefaults()
	yml, _ := buildConfig([]v1.Policy{p}, ps, o, BuildPolicyEntry)
	if err := e.c.Create(e.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: v1.PolicyServerObjectName("default"), Labels: map[string]string{v1.PolicyServerLabel: "default"},
			Annotations: map[string]string{v1.ConfigDigestAnnotation: ConfigDigest(yml)}},
		Data: map[string]string{v1.PoliciesKey: string(yml)},
	}); err != nil {
		b.Fatal(err)
	}
	s := e.addServer("default")
	s.serve(ConfigDigest(yml), ready(v1.PolicyID(p.PolicyKind(), "", p.Name)))
	r := e.rs[p.PolicyKind()]
	r.build = BuildPolicyEntry
	r.statuses.ttl = time.Hour
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}}
	if _, err := r.Reconcile(e.ctx, req); err != nil {
		b.Fatal(err)
	}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(p), p); err != nil || p.Status.PolicyStatus != v1.PolicyStatusActive {
		b.Fatalf("not active: %v %+v", err, p.Status)
	}
	writes := e.writes.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := r.Reconcile(e.ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	if n := e.writes.Load() - writes; n != 0 {
		b.Fatalf("%d writes", n)
	}
}

// TestReadsSecretsWarning: a cluster-wide policy (or a group member) that declares Secrets in
// contextAwareResources gets the ReadsSecrets condition and one Warning Event; the condition
// goes when the declaration does.
func TestReadsSecretsWarning(t *testing.T) {
	p := cap1("secrets")
	p.Spec.ContextAwareResources = []v1.ContextAwareResource{{APIVersion: "v1", Kind: "ConfigMap"}, {APIVersion: "v1", Kind: "Secret"}}
	e := newEnv(t, policyServer("default"), p)
	e.addServer("default").serve(e.writeConfig("default", p), ready("clusterwide-secrets"))
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusActive, ReasonPolicyActive)
	wantCondition(t, p, v1.ConditionReadsSecrets, metav1.ConditionTrue, ReasonSecretsDeclared)
	warned := func(evs []string) bool {
		return slices.ContainsFunc(evs, func(s string) bool { return strings.HasPrefix(s, "Warning "+ReasonSecretsDeclared) })
	}
	if evs := e.events(); !warned(evs) {
		t.Errorf("no Warning %s event: %q", ReasonSecretsDeclared, evs)
	}
	c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReadsSecrets)
	for _, s := range []string{"the policy declares Secrets", `PolicyServer "default"`, "tollgate-policy-server-default-context-aware"} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("message %q lacks %q", c.Message, s)
		}
	}
	e.reconcile(p) // a second reconcile is quiet
	if evs := e.events(); warned(evs) {
		t.Errorf("a second reconcile warned again: %v", evs)
	}
	p.Spec.ContextAwareResources = p.Spec.ContextAwareResources[:1]
	if err := e.c.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.reconcile(p)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReadsSecrets); c != nil {
		t.Errorf("ReadsSecrets still set: %+v", c)
	}

	g := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	g.Spec.Policies = map[string]v1.ClusterPolicyGroupMember{
		"b": {ContextAwareResources: []v1.ContextAwareResource{{APIVersion: "v1", Kind: "Secret"}}},
		"a": {ContextAwareResources: []v1.ContextAwareResource{{APIVersion: "v1", Kind: "Secret"}}},
		"c": {ContextAwareResources: []v1.ContextAwareResource{{APIVersion: "example.com/v1", Kind: "Secret"}}},
	}
	if got := declaresSecrets(g); !slices.Equal(got, []string{"member a", "member b"}) {
		t.Errorf("declaresSecrets(group) = %q", got)
	}
	ap := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "a"}}
	if got := declaresSecrets(ap); got != nil {
		t.Errorf("declaresSecrets(AdmissionPolicy) = %q", got)
	}
}

// TestPolicyStatusKeepsAudit: status.audit, written by `tollgate audit` with a merge patch of
// that field alone, survives the controller's status writes (a stage change), and the patch
// leaves the controller's fields alone.
func TestPolicyStatusKeepsAudit(t *testing.T) {
	p := cap1("audited")
	e := newEnv(t, p)
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusUnscheduled, ReasonPolicyServerNotFound)
	patch := []byte(`{"status":{"audit":{"lastAuditTime":"2026-11-27T08:30:00Z","violations":2,"errors":1,"passed":3}}}`)
	if err := e.c.Status().Patch(e.ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	wantStage(t, p, v1.PolicyStatusUnscheduled, ReasonPolicyServerNotFound)
	if err := e.c.Create(e.ctx, policyServer("default")); err != nil {
		t.Fatal(err)
	}
	before := e.writes.Load()
	e.reconcile(p)
	wantStage(t, p, v1.PolicyStatusScheduled, ReasonConfigurationPending)
	if e.writes.Load() == before {
		t.Fatal("the stage change wrote no status")
	}
	a := p.Status.Audit
	if a == nil || a.Violations != 2 || a.Errors != 1 || a.Passed != 3 || !a.LastAuditTime.Equal(&metav1.Time{Time: time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)}) {
		t.Fatalf("status.audit after the controller's write: %+v", a)
	}
}
