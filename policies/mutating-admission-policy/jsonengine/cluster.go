package jsonengine

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Cluster supplies, from a live cluster, what the apiserver's informers and
// authorizer give its dispatcher: the request's Namespace (namespaceSelector,
// namespaceObject), the parameter objects of paramKind and the decisions of
// CEL's authorizer. It is package engine's Cluster on JSON objects: the
// guest implements it with Kubewarden's host capabilities (kubernetes
// get_resource, list_resources_*, can_i) when the settings say fromCluster;
// this package never makes a host call.
type Cluster interface {
	// Namespace returns the Namespace called name as a JSON object (numbers
	// as int64 or float64), or an error (not found included).
	Namespace(name string) (map[string]any, error)
	// ParamsNamespaced reports whether the kind apiVersion/kind is
	// namespaced.
	ParamsNamespaced(apiVersion, kind string) (bool, error)
	// Params returns the objects of apiVersion/kind in namespace ("" for a
	// cluster-scoped kind): the one called name when name is not empty
	// (none when it does not exist), else those matching labelSelector
	// ("" = all), in the string form of apimachinery's labels.Selector.
	Params(apiVersion, kind, namespace, name, labelSelector string) ([]map[string]any, error)
	// Authorize answers CEL's authorizer checks (a SubjectAccessReview).
	Authorize(AuthorizationRequest) (Decision, string, error)
}

// AuthorizationRequest is one check of CEL's authorizer: the attributes the
// apiserver's authz library gives its authorizer (authorizer.AttributesRecord).
type AuthorizationRequest struct {
	User   string
	Groups []string
	Verb   string
	// ResourceRequest is true for a resource check (group, resource...),
	// false for a path check (Path).
	ResourceRequest bool
	Path            string
	APIGroup        string
	APIVersion      string // "*" for the library's resource checks
	Resource        string
	Subresource     string
	Namespace       string
	Name            string
	FieldSelector   string // carried as the library gives them
	LabelSelector   string
}

// FromCluster reports whether the settings say fromCluster: true (the guest
// then calls WithCluster).
func (e *Engine) FromCluster() bool { return e.s.FromCluster }

// WithCluster returns a copy of the engine that takes namespaces, params and
// authorizer decisions from c instead of the settings (which then have none:
// the settings' decoding refuses them with fromCluster). The compiled policy
// is shared.
func (e *Engine) WithCluster(c Cluster) *Engine {
	cp := *e
	cp.cluster = c
	cp.authorize = clusterAuthorizer(c)
	return &cp
}

func clusterAuthorizer(c Cluster) authorizerFunc {
	return func(a *authzAttributes) (decision, string, error) {
		r := AuthorizationRequest{
			Verb: a.verb, ResourceRequest: a.resourceRequest, Path: a.path,
			APIGroup: a.apiGroup, Resource: a.resource, Subresource: a.subresource,
			Namespace: a.namespace, Name: a.name, FieldSelector: a.fieldSelector, LabelSelector: a.labelSelector,
		}
		if a.apiVersionIsStar {
			r.APIVersion = "*"
		}
		if a.user != nil {
			r.User, r.Groups = a.user.name, a.user.groups
		}
		return c.Authorize(r)
	}
}

// clusterNamespace is the Namespace called name from the cluster, as the
// apiserver's informer holds it (typed, then read back as JSON).
func (e *Engine) clusterNamespace(name string) (map[string]any, error) {
	ns, err := e.cluster.Namespace(name)
	if err != nil {
		return nil, err
	}
	cp := make(map[string]any, len(ns)+2)
	for k, v := range ns {
		cp[k] = v
	}
	cp["apiVersion"], cp["kind"] = "v1", "Namespace"
	return roundTripObject(cp, "", "v1", "Namespace", false)
}

// clusterParams reads the params of apiVersion/kind from the cluster, in
// namespace ("" for a cluster-scoped kind): the one called name when sel is
// nil, else those it matches. They are typed as the apiserver's informers
// hold them (built-in kinds).
func (e *Engine) clusterParams(apiVersion, kind, namespace, name string, sel *labelSelector) ([]map[string]any, error) {
	selString := ""
	if sel != nil {
		name, selString = "", selectorString(sel)
	}
	objs, err := e.cluster.Params(apiVersion, kind, namespace, name, selString)
	if err != nil {
		return nil, fmt.Errorf("failed to list params: %w", err)
	}
	g, v, found := strings.Cut(apiVersion, "/")
	if !found {
		g, v = "", apiVersion
	}
	params := make([]map[string]any, 0, len(objs))
	for i, o := range objs {
		cp := make(map[string]any, len(o)+2)
		for k, x := range o {
			cp[k] = x
		}
		cp["apiVersion"], cp["kind"] = apiVersion, kind // list items may lack them
		p, err := roundTripObject(cp, g, v, kind, false)
		if err != nil {
			return nil, fmt.Errorf("params from the cluster [%d]: not a valid %s: %w", i, kind, err)
		}
		params = append(params, p)
	}
	return params, nil
}

// parseGroupVersion is apimachinery's schema.ParseGroupVersion, for its error.
func parseGroupVersion(gv string) (group, version string, err error) {
	if gv == "" || gv == "/" {
		return "", "", nil
	}
	switch strings.Count(gv, "/") {
	case 0:
		return "", gv, nil
	case 1:
		g, v, _ := strings.Cut(gv, "/")
		return g, v, nil
	}
	return "", "", fmt.Errorf("unexpected GroupVersion string: %v", gv)
}

// gvkString is schema.GroupVersionKind's String.
func gvkString(group, version, kind string) string {
	return group + "/" + version + ", Kind=" + kind
}

// selectorString is the String of the labels.Selector that
// metav1.LabelSelectorAsSelector makes of sel (what the host passes on to
// the apiserver as a label selector): requirements sorted by key, matchLabels
// as key=value, In and NotIn with their values sorted.
func selectorString(sel *labelSelector) string {
	type req struct{ key, s string }
	var reqs []req
	keys := make([]string, 0, len(sel.MatchLabels))
	for k := range sel.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		reqs = append(reqs, req{k, k + "=" + sel.MatchLabels[k]})
	}
	for _, x := range sel.MatchExpressions {
		vals := append([]string(nil), x.Values...)
		sort.Strings(vals)
		switch x.Operator {
		case "In":
			reqs = append(reqs, req{x.Key, x.Key + " in (" + strings.Join(vals, ",") + ")"})
		case "NotIn":
			reqs = append(reqs, req{x.Key, x.Key + " notin (" + strings.Join(vals, ",") + ")"})
		case "Exists":
			reqs = append(reqs, req{x.Key, x.Key})
		case "DoesNotExist":
			reqs = append(reqs, req{x.Key, "!" + x.Key})
		}
	}
	// labels.Selector.Add sorts with sort.Sort, which is stable for the
	// dozen requirements a selector has
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].key < reqs[j].key })
	parts := make([]string, len(reqs))
	for i, r := range reqs {
		parts[i] = r.s
	}
	return strings.Join(parts, ",")
}

// memoCluster remembers a cluster's answers for one evaluation, so that an
// evaluation asks the cluster each question once (package engine's memo:
// the policy's and the binding's namespaceSelector and namespaceObject read
// one Namespace; a check repeated per parameter is asked once).
type memoCluster struct {
	c       Cluster
	mu      sync.Mutex
	answers map[string]memoAnswer
}

type memoAnswer struct {
	v        any
	decision Decision
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

func (m *memoCluster) Namespace(name string) (map[string]any, error) {
	a := m.memo("ns\x00"+name, func() memoAnswer {
		ns, err := m.c.Namespace(name)
		return memoAnswer{v: ns, err: err}
	})
	ns, _ := a.v.(map[string]any)
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

func (m *memoCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]map[string]any, error) {
	a := m.memo(strings.Join([]string{"params", apiVersion, kind, namespace, name, labelSelector}, "\x00"), func() memoAnswer {
		p, err := m.c.Params(apiVersion, kind, namespace, name, labelSelector)
		return memoAnswer{v: p, err: err}
	})
	p, _ := a.v.([]map[string]any)
	return p, a.err
}

func (m *memoCluster) Authorize(r AuthorizationRequest) (Decision, string, error) {
	key := strings.Join([]string{"authz", r.User, strings.Join(r.Groups, ","), fmt.Sprint(r.ResourceRequest), r.Verb, r.Namespace, r.APIGroup,
		r.APIVersion, r.Resource, r.Subresource, r.Name, r.Path, r.FieldSelector, r.LabelSelector}, "\x00")
	a := m.memo(key, func() memoAnswer {
		d, reason, err := m.c.Authorize(r)
		return memoAnswer{decision: d, reason: reason, err: err}
	})
	return a.decision, a.reason, a.err
}
