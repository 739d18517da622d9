package opa

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// clusterData builds the data document of a context-aware Rego policy from
// the objects of the resources it is granted, as Kubewarden's Rego runtime
// does before each evaluation:
//
//   - opa: the settings with the key kubernetes (replacing a setting of that
//     name) = {plural: {namespace: {name: object}}}, or {plural: {name:
//     object}} for objects without a namespace (kube-mgmt's layout);
//   - gatekeeper: {"inventory": {"cluster": {apiVersion: {kind: {name:
//     object}}}, "namespace": {namespace: {apiVersion: {kind: {name:
//     object}}}}}} (Gatekeeper's sync layout).
//
// The built document is kept while the source's change signal says that no
// listed resource changed (informer events); without a signal (no synced
// cache, recording, replaying) every evaluation lists again, which is what
// a kwctl session holds.
type clusterData struct {
	src  *capabilities.Cluster
	mode string
	// settings is the opa data document's start: the settings object
	// without its closing brace and without a kubernetes member.
	settings []byte

	mu       sync.Mutex
	versions []uint64 // the versions cached was built from
	cached   *Data    // nil: none
	plurals  map[capabilities.Resource]string

	// builds counts the documents built (tests, benchmarks).
	builds atomic.Int64
}

func newClusterData(src *capabilities.Cluster, mode string, settings json.RawMessage) (*clusterData, error) {
	c := &clusterData{src: src, mode: mode, plurals: map[capabilities.Resource]string{}}
	if mode == metadata.ExecutionModeOPA {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(settings, &m); err != nil {
			return nil, fmt.Errorf("settings: %w", err)
		}
		delete(m, "kubernetes")
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b := []byte{'{'}
		for _, k := range keys {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = fastjson.AppendQuote(b, k)
			b = append(b, ':')
			b = append(b, m[k]...)
		}
		c.settings = b
	}
	return c, nil
}

// data returns the data document for one evaluation; nil when the policy is
// granted no resource (the module then sees its settings, or {}, alone).
func (c *clusterData) data(ctx context.Context) (*Data, error) {
	res := c.src.Resources()
	if len(res) == 0 {
		return nil, nil
	}
	vs := make([]uint64, len(res))
	signal := true
	for i, r := range res {
		v, ok := c.src.Version(r)
		if !ok {
			signal = false
			break
		}
		vs[i] = v
	}
	if signal {
		c.mu.Lock()
		d := c.cached
		same := d != nil && slices.Equal(vs, c.versions)
		c.mu.Unlock()
		if same {
			return d, nil
		}
	}
	// The versions were read before the lists: a change after the read is
	// in the lists or moves a version, so the document is never older than
	// the versions it is kept for.
	lists := make([][]byte, len(res))
	for i, r := range res {
		b, err := c.src.ListAll(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("listing %s/%s: %w", r.APIVersion, r.Kind, err)
		}
		lists[i] = b
	}
	var doc []byte
	var err error
	if c.mode == metadata.ExecutionModeOPA {
		plurals := make([]string, len(res))
		for i, r := range res {
			if plurals[i], err = c.pluralName(ctx, r); err != nil {
				return nil, fmt.Errorf("the plural name of %s/%s: %w", r.APIVersion, r.Kind, err)
			}
		}
		doc, err = c.opaDocument(res, lists, plurals)
	} else {
		doc, err = gatekeeperDocument(res, lists)
	}
	if err != nil {
		return nil, err
	}
	c.builds.Add(1)
	d := NewData(doc)
	if signal {
		c.mu.Lock()
		c.cached, c.versions = d, vs
		c.mu.Unlock()
	}
	return d, nil
}

func (c *clusterData) pluralName(ctx context.Context, r capabilities.Resource) (string, error) {
	keep := c.src.CachesPluralNames()
	if keep {
		c.mu.Lock()
		p, ok := c.plurals[r]
		c.mu.Unlock()
		if ok {
			return p, nil
		}
	}
	p, err := c.src.PluralName(ctx, r)
	if err == nil && keep {
		c.mu.Lock()
		c.plurals[r] = p
		c.mu.Unlock()
	}
	return p, err
}

// tree is a JSON object under construction: members are trees or raw JSON.
type tree map[string]any

func (t tree) sub(k string) tree {
	s, ok := t[k].(tree)
	if !ok {
		s = tree{}
		t[k] = s
	}
	return s
}

func (t tree) appendJSON(b []byte) []byte {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = fastjson.AppendQuote(b, k)
		b = append(b, ':')
		switch v := t[k].(type) {
		case tree:
			b = v.appendJSON(b)
		case []byte:
			b = append(b, v...)
		}
	}
	return append(b, '}')
}

// listItem is one object of a list: its bytes, name and namespace ("" for
// cluster-scoped objects).
type listItem struct {
	raw             []byte
	name, namespace string
	namespaced      bool
}

// items reads a List answer's objects.
func items(r capabilities.Resource, list []byte) ([]listItem, error) {
	v, err := fastjson.Parse(list)
	if err != nil {
		return nil, fmt.Errorf("the list of %s/%s is not JSON: %w", r.APIVersion, r.Kind, err)
	}
	its := v.Get("items")
	if its.Kind() != fastjson.Array && !its.IsNull() {
		return nil, fmt.Errorf("the list of %s/%s has no items array", r.APIVersion, r.Kind)
	}
	var out []listItem
	var bad error
	its.ForEach(func(i int, o fastjson.Value) bool {
		name, ok := o.Get("metadata", "name").Str()
		if !ok || name == "" {
			bad = fmt.Errorf("object %d of the list of %s/%s has no metadata.name", i, r.APIVersion, r.Kind)
			return false
		}
		it := listItem{raw: o.Raw(), name: name}
		if ns := o.Get("metadata", "namespace"); !ns.IsNull() {
			if it.namespace, ok = ns.Str(); !ok {
				bad = fmt.Errorf("object %s of the list of %s/%s: metadata.namespace is not a string", name, r.APIVersion, r.Kind)
				return false
			}
			it.namespaced = true
		}
		out = append(out, it)
		return true
	})
	return out, bad
}

// opaDocument is the settings with kubernetes = {plural: {ns: {name: obj}}}
// ({plural: {name: obj}} for objects without a namespace). A plural appears
// once it has an object; objects of both scopes under one plural are an
// error, as with Kubewarden.
func (c *clusterData) opaDocument(res []capabilities.Resource, lists [][]byte, plurals []string) ([]byte, error) {
	inv := tree{}
	scope := map[string]bool{} // plural -> namespaced
	size := len(c.settings) + 32
	for i, r := range res {
		its, err := items(r, lists[i])
		if err != nil {
			return nil, err
		}
		p := plurals[i]
		for _, it := range its {
			if ns, seen := scope[p]; seen && ns != it.namespaced {
				return nil, fmt.Errorf("data.kubernetes.%s: %s/%s %s mixes namespaced and cluster-wide objects", p, r.APIVersion, r.Kind, it.name)
			}
			scope[p] = it.namespaced
			if it.namespaced {
				inv.sub(p).sub(it.namespace)[it.name] = it.raw
			} else {
				inv.sub(p)[it.name] = it.raw
			}
			size += len(it.raw) + len(it.name) + 8
		}
	}
	b := make([]byte, 0, size)
	b = append(b, c.settings...)
	if len(c.settings) > 1 {
		b = append(b, ',')
	}
	b = append(b, `"kubernetes":`...)
	b = inv.appendJSON(b)
	return append(b, '}'), nil
}

// gatekeeperDocument is {"inventory": {"cluster": {apiVersion: {kind:
// {name: obj}}}, "namespace": {ns: {apiVersion: {kind: {name: obj}}}}}},
// keyed by the granted resource's apiVersion and kind.
func gatekeeperDocument(res []capabilities.Resource, lists [][]byte) ([]byte, error) {
	inv := tree{"cluster": tree{}, "namespace": tree{}}
	size := 64
	for i, r := range res {
		its, err := items(r, lists[i])
		if err != nil {
			return nil, err
		}
		for _, it := range its {
			if it.namespaced {
				inv.sub("namespace").sub(it.namespace).sub(r.APIVersion).sub(r.Kind)[it.name] = it.raw
			} else {
				inv.sub("cluster").sub(r.APIVersion).sub(r.Kind)[it.name] = it.raw
			}
			size += len(it.raw) + len(it.name) + 8
		}
	}
	b := append(make([]byte, 0, size), `{"inventory":`...)
	b = inv.appendJSON(b)
	return append(b, '}'), nil
}
