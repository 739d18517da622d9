package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// memCluster is a Cluster held in memory: what the guest's hostCluster
// answers through the host capabilities, without a host. It counts the
// questions it is asked.
type memCluster struct {
	namespaces map[string]map[string]string // name -> labels
	params     []*unstructured.Unstructured
	namespaced map[string]bool // "apiVersion/kind"
	allow      func(authorizer.Attributes) bool
	fail       error // every answer fails with it when set

	mu    sync.Mutex
	calls map[string]int
}

func (m *memCluster) count(q string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[q]++
}

func (m *memCluster) Namespace(name string) (*corev1.Namespace, error) {
	m.count("namespace")
	if m.fail != nil {
		return nil, m.fail
	}
	l, ok := m.namespaces[name]
	if !ok {
		return nil, errors.New("Cannot find v1/Namespace named '" + name + "' inside of namespace 'None'")
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, nil
}

func (m *memCluster) ParamsNamespaced(apiVersion, kind string) (bool, error) {
	m.count("scope")
	if m.fail != nil {
		return false, m.fail
	}
	return m.namespaced[apiVersion+"/"+kind], nil
}

func (m *memCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]*unstructured.Unstructured, error) {
	m.count("params")
	if m.fail != nil {
		return nil, m.fail
	}
	sel, err := labels.Parse(labelSelector)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, p := range m.params {
		if p.GetAPIVersion() != apiVersion || p.GetKind() != kind || p.GetNamespace() != namespace {
			continue
		}
		if name != "" && p.GetName() != name || name == "" && !sel.Matches(labels.Set(p.GetLabels())) {
			continue
		}
		c := p.DeepCopy()
		// A list's items come without apiVersion and kind.
		delete(c.Object, "apiVersion")
		delete(c.Object, "kind")
		out = append(out, c)
	}
	return out, nil
}

func (m *memCluster) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	m.count("authorize")
	if m.fail != nil {
		return authorizer.DecisionNoOpinion, "", m.fail
	}
	if m.allow != nil && m.allow(a) {
		return authorizer.DecisionAllow, "allowed by the test", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func configMap(ns, name, v string, lbls map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name, "namespace": ns}
	if lbls != nil {
		meta["labels"] = lbls
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": map[string]any{"v": v},
	}}
}

func newMemCluster() *memCluster {
	return &memCluster{
		namespaces: map[string]map[string]string{"default": {"env": "prod"}, "other": {"env": "test"}},
		params: []*unstructured.Unstructured{
			configMap("default", "a", "1", map[string]any{"pick": "yes"}),
			configMap("default", "b", "2", map[string]any{"pick": "yes"}),
			configMap("other", "c", "3", map[string]any{"pick": "yes"}),
		},
		namespaced: map[string]bool{"v1/ConfigMap": true},
	}
}

func compileCluster(t *testing.T, settings string, c Cluster) *Engine {
	t.Helper()
	e := compile(t, settings+"\nfromCluster: true\n")
	if !e.Settings().FromCluster {
		t.Fatal("Settings().FromCluster is false")
	}
	return e.WithCluster(c)
}

// TestCluster: with fromCluster, the namespace (namespaceSelector and
// namespaceObject), the params and the authorizer's decisions come from the
// cluster, with the same outcomes as the settings give offline.
func TestCluster(t *testing.T) {
	const setFromParams = `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {params.metadata.name: params.data.v}}}"}`
	labeled := func(labels string) string {
		return deploymentAfter("  labels: {app: web}\n", "  labels: {app: web"+labels+"}\n")
	}
	paramKind := "  paramKind: {apiVersion: v1, kind: ConfigMap}"
	nsSelector := func(sel string) string {
		return strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {"+sel+"}}\n  reinvocationPolicy: Never\n", 1)
	}
	cases := []struct {
		name     string
		settings string
		r        req
		w        want
	}{
		{"namespaceSelector matches the cluster's labels", nsSelector("env: prod"), req{object: deployment}, want{object: replicas5}},
		{"namespaceSelector does not match", nsSelector("env: test"), req{object: deployment}, want{unchanged: true}},
		{"namespaceObject", policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'env': namespaceObject.metadata.labels['env']}}]"}`, ""),
			req{object: deployment}, want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web}\n  annotations: {env: prod}\n")}},
		{"param by name in the request namespace", policy(paramKind, setFromParams, "binding: {paramRef: {name: a}}"), req{object: deployment}, want{object: labeled(", a: \"1\"")}},
		{"param by name in another namespace", policy(paramKind, setFromParams, "binding: {paramRef: {name: c, namespace: other}}"), req{object: deployment}, want{object: labeled(", c: \"3\"")}},
		{"params by selector", policy(paramKind, setFromParams, "binding: {paramRef: {selector: {matchLabels: {pick: \"yes\"}}}}"), req{object: deployment}, want{object: labeled(", a: \"1\", b: \"2\"")}},
		{"param not found, Deny", policy(paramKind, setFromParams, "binding: {paramRef: {name: zz, parameterNotFoundAction: Deny}}"), req{object: deployment},
			want{reject: "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"}},
		{"param not found, Allow", policy(paramKind, setFromParams, "binding: {paramRef: {name: zz, parameterNotFoundAction: Allow}}"), req{object: deployment}, want{unchanged: true}},
		{"authorizer", policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'delete': string(authorizer.group('apps').resource('deployments').namespace('default').check('delete').allowed()), 'patch': string(authorizer.group('apps').resource('deployments').namespace('default').check('patch').allowed())}}]"}`, ""),
			req{object: deployment}, want{object: deploymentAfter("  labels: {app: web}\n", "  labels: {app: web}\n  annotations: {delete: \"true\", patch: \"false\"}\n")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mc := newMemCluster()
			mc.allow = func(a authorizer.Attributes) bool {
				return a.GetUser().GetName() == "alice" && a.GetVerb() == "delete" && a.GetResource() == "deployments"
			}
			check(t, compileCluster(t, c.settings, mc), c.r, c.w)
		})
	}
}

// TestClusterFailure: a cluster that cannot answer fails the binding, and
// the policy's failurePolicy decides.
func TestClusterFailure(t *testing.T) {
	down := errors.New("the apiserver is unreachable")
	nsSel := strings.Replace(policy("", setReplicas5, ""), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {env: prod}}\n  reinvocationPolicy: Never\n", 1)
	nsObj := policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'n': namespaceObject.metadata.name}}]"}`, "")
	params := policy("  paramKind: {apiVersion: v1, kind: ConfigMap}", setReplicas5, "binding: {paramRef: {name: a}}")
	for _, c := range []struct{ name, settings, reject string }{
		{"namespaceSelector", nsSel, "the apiserver is unreachable"},
		{"namespaceObject", nsObj, "failed to get the namespace object: the apiserver is unreachable"},
		{"params", params, "the apiserver is unreachable"},
	} {
		t.Run(c.name+", Fail", func(t *testing.T) {
			mc := newMemCluster()
			mc.fail = down
			check(t, compileCluster(t, c.settings, mc), req{object: deployment}, want{reject: c.reject})
		})
		t.Run(c.name+", Ignore", func(t *testing.T) {
			mc := newMemCluster()
			mc.fail = down
			s := strings.Replace(c.settings, "  reinvocationPolicy: Never\n", "  failurePolicy: Ignore\n  reinvocationPolicy: Never\n", 1)
			check(t, compileCluster(t, s, mc), req{object: deployment}, want{unchanged: true})
		})
	}
}

// TestClusterAskedOnce: one evaluation asks the cluster each question once,
// even when the exact path redoes what the fast path could not vouch for.
func TestClusterAskedOnce(t *testing.T) {
	mc := newMemCluster()
	e := compileCluster(t, strings.Replace(policy("  paramKind: {apiVersion: v1, kind: ConfigMap}", `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {params.metadata.name: namespaceObject.metadata.labels['env']}}}"}`,
		"binding: {paramRef: {selector: {}}}"), "  reinvocationPolicy: Never\n", "    namespaceSelector: {matchLabels: {env: prod}}\n  reinvocationPolicy: Never\n", 1), mc)
	for _, exactOnly := range []bool{false, true} {
		mc.calls = nil
		ee := *e
		ee.exactOnly = exactOnly
		res, err := ee.Evaluate(context.Background(), req{object: deployment}.build(t))
		if err != nil || !res.Accepted || res.Object == nil {
			t.Fatalf("exactOnly=%v: %+v %v", exactOnly, res, err)
		}
		for q, n := range mc.calls {
			if n != 1 {
				t.Errorf("exactOnly=%v: %s asked %d times, want once (%v)", exactOnly, q, n, mc.calls)
			}
		}
		if mc.calls["namespace"] != 1 || mc.calls["params"] != 1 || mc.calls["scope"] != 1 {
			t.Errorf("exactOnly=%v: calls %v, want namespace, scope and params once each", exactOnly, mc.calls)
		}
	}
}

// TestFromClusterSettings: fromCluster takes no settings-given params,
// namespaces or rbac, and says which to remove.
func TestFromClusterSettings(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{"params: [{apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: default}}]", "remove params"},
		{"namespaces: [{metadata: {name: default}}]", "remove namespaces"},
		{"rbac: {roles: []}", "remove rbac"},
	} {
		_, err := Compile([]byte(policy("", setReplicas5, c.extra+"\nfromCluster: true")))
		if !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "fromCluster") {
			t.Errorf("%s: err %v, want ErrInvalidSettings naming fromCluster and %q", c.extra, err, c.want)
		}
	}
	e := compile(t, policy("", setReplicas5, ""))
	if e.Settings().FromCluster {
		t.Error("FromCluster set without fromCluster in the settings")
	}
}
