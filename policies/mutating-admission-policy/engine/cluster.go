package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Cluster supplies, from a live cluster, what the apiserver's informers and
// authorizer give its dispatcher: the request's Namespace (namespaceSelector,
// namespaceObject), the parameter objects of paramKind and the decisions of
// CEL's authorizer. The policy's guest implements it with Kubewarden's host
// capabilities (kubernetes get_resource, list_resources_*, can_i) when the
// settings say fromCluster; this package never makes a host call.
type Cluster interface {
	// Namespace returns the Namespace called name, or an error (not found
	// included).
	Namespace(name string) (*corev1.Namespace, error)
	// ParamsNamespaced reports whether the kind apiVersion/kind is
	// namespaced.
	ParamsNamespaced(apiVersion, kind string) (bool, error)
	// Params returns the objects of apiVersion/kind in namespace ("" for a
	// cluster-scoped kind): the one called name when name is not empty
	// (none when it does not exist), else those matching labelSelector
	// ("" = all).
	Params(apiVersion, kind, namespace, name, labelSelector string) ([]*unstructured.Unstructured, error)
	// Authorizer answers CEL's authorizer checks (a SubjectAccessReview).
	authorizer.Authorizer
}

// namespaceGetter is where the request's Namespace comes from: the settings'
// namespaces, or the cluster.
type namespaceGetter interface {
	Get(name string) (*corev1.Namespace, error)
}

type clusterNamespaces struct{ c Cluster }

func (n clusterNamespaces) Get(name string) (*corev1.Namespace, error) {
	ns, err := n.c.Namespace(name)
	if err != nil {
		return nil, err
	}
	ns = ns.DeepCopy()
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns, nil
}

// WithCluster returns a copy of the engine that takes namespaces, params and
// authorizer decisions from c instead of the settings (which must then have
// none: Decode refuses them with fromCluster). The compiled policy is shared.
func (e *Engine) WithCluster(c Cluster) *Engine {
	cp := *e
	cp.cluster = c
	cp.namespaces = clusterNamespaces{c}
	cp.authorizer = c
	cp.params, cp.paramsNamespaced = nil, false
	return &cp
}

// clusterParams reads the params of kind gvk from the cluster, in namespace
// ("" for a cluster-scoped kind): the one called name when selector is nil,
// else those it matches. They are typed as the apiserver's informers hold
// them.
func (e *Engine) clusterParams(gvk schema.GroupVersionKind, namespace, name string, selector labels.Selector) ([]runtime.Object, error) {
	sel := ""
	if selector != nil {
		name, sel = "", selector.String()
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	objs, err := e.cluster.Params(apiVersion, kind, namespace, name, sel)
	if err != nil {
		return nil, fmt.Errorf("failed to list params: %w", err)
	}
	var params []runtime.Object
	for i, o := range objs {
		o.SetGroupVersionKind(gvk) // list items may lack apiVersion and kind
		obj, err := typedParam(o, gvk, e.scheme)
		if err != nil {
			return nil, fmt.Errorf("params from the cluster [%d]: %w", i, err)
		}
		params = append(params, obj)
	}
	return params, nil
}

// typedParam holds a parameter object typed for the built-in kinds (the
// apiserver's informers hold them typed), unstructured otherwise.
func typedParam(p *unstructured.Unstructured, gvk schema.GroupVersionKind, sch *runtime.Scheme) (runtime.Object, error) {
	if !sch.Recognizes(gvk) {
		return p, nil
	}
	typed, err := sch.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(p.Object, typed); err != nil {
		return nil, fmt.Errorf("not a valid %s: %w", gvk.Kind, err)
	}
	typed.GetObjectKind().SetGroupVersionKind(gvk)
	return typed, nil
}

// memoCluster remembers a cluster's answers for one evaluation, so that the
// exact path, when it redoes what the fast path could not vouch for, asks
// the cluster nothing twice (and a recorded session replays either way).
type memoCluster struct {
	c       Cluster
	mu      sync.Mutex
	answers map[string]memoAnswer
}

type memoAnswer struct {
	v        any
	decision authorizer.Decision
	reason   string
	err      error
}

func (m *memoCluster) memo(key string, f func() memoAnswer) memoAnswer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.answers[key]; ok {
		return a
	}
	a := f()
	if m.answers == nil {
		m.answers = map[string]memoAnswer{}
	}
	m.answers[key] = a
	return a
}

func (m *memoCluster) Namespace(name string) (*corev1.Namespace, error) {
	a := m.memo("ns\x00"+name, func() memoAnswer {
		ns, err := m.c.Namespace(name)
		return memoAnswer{v: ns, err: err}
	})
	ns, _ := a.v.(*corev1.Namespace)
	return ns, a.err
}

func (m *memoCluster) ParamsNamespaced(apiVersion, kind string) (bool, error) {
	a := m.memo("scope\x00"+apiVersion+"\x00"+kind, func() memoAnswer {
		n, err := m.c.ParamsNamespaced(apiVersion, kind)
		return memoAnswer{v: n, err: err}
	})
	n, _ := a.v.(bool)
	return n, a.err
}

func (m *memoCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]*unstructured.Unstructured, error) {
	a := m.memo(strings.Join([]string{"params", apiVersion, kind, namespace, name, labelSelector}, "\x00"), func() memoAnswer {
		p, err := m.c.Params(apiVersion, kind, namespace, name, labelSelector)
		return memoAnswer{v: p, err: err}
	})
	p, _ := a.v.([]*unstructured.Unstructured)
	out := make([]*unstructured.Unstructured, len(p))
	for i, o := range p {
		out[i] = o.DeepCopy() // the dispatcher may set fields (apiVersion, kind) on them
	}
	return out, a.err
}

func (m *memoCluster) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	var user, groups string
	if u := attrs.GetUser(); u != nil {
		user, groups = u.GetName(), strings.Join(u.GetGroups(), ",")
	}
	key := strings.Join([]string{"authz", user, groups, fmt.Sprint(attrs.IsResourceRequest()), attrs.GetVerb(), attrs.GetNamespace(), attrs.GetAPIGroup(),
		attrs.GetAPIVersion(), attrs.GetResource(), attrs.GetSubresource(), attrs.GetName(), attrs.GetPath()}, "\x00")
	a := m.memo(key, func() memoAnswer {
		d, r, err := m.c.Authorize(ctx, attrs)
		return memoAnswer{decision: d, reason: r, err: err}
	})
	return a.decision, a.reason, a.err
}
