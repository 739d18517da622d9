package capabilities

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Cluster gives a context-aware Rego policy (executionMode opa or
// gatekeeper) the objects of the Kubernetes resources it may read. Such a
// module never calls the host: Kubewarden's host lists every object of each
// granted resource before an evaluation and hands the module the result as
// data (data.kubernetes for opa, data.inventory for gatekeeper; host/opa
// builds them). Cluster makes those requests the way Kubewarden does, so
// that record and replay hold what kwctl would: per evaluation one
// KubernetesListResourceAll per resource, ordered by apiVersion then kind
// (with label_selector, field_selector and field_masks null, disable_cache
// false), then, for opa, one KubernetesGetResourcePluralName per resource in
// the same order. A Cluster is safe for concurrent use.
type Cluster struct {
	h         *Host
	id        string
	resources []Resource
	granted   map[Resource]bool
}

// Cluster returns policy id's view of the cluster: the resources it is
// granted (contextAwareResources), sorted by apiVersion then kind, duplicates
// dropped.
func (h *Host) Cluster(id string, resources []Resource) *Cluster {
	c := &Cluster{h: h, id: id, granted: map[Resource]bool{}}
	for _, r := range resources {
		if !c.granted[r] {
			c.granted[r] = true
			c.resources = append(c.resources, r)
		}
	}
	sort.Slice(c.resources, func(i, j int) bool {
		a, b := c.resources[i], c.resources[j]
		if a.APIVersion != b.APIVersion {
			return a.APIVersion < b.APIVersion
		}
		return a.Kind < b.Kind
	})
	return c
}

// Resources are the granted resources, in the order their lists are made.
func (c *Cluster) Resources() []Resource { return c.resources }

// ListAll returns every object of the resource as a List
// ({"apiVersion","kind":"<Kind>List","metadata":{},"items":[...]}), as
// kubernetes/list_resources_all answers it: from the resource's cache when
// it has synced, from the apiserver before, from the session when replaying.
// A resource not granted is refused with Kubewarden's text.
func (c *Cluster) ListAll(ctx context.Context, r Resource) ([]byte, error) {
	const capName = "kubernetes/list_resources_all"
	start := time.Now()
	if !c.granted[r] {
		err := c.h.denyResource(c.id, capName, r)
		c.h.m.observe(c.id, capName, "denied", time.Since(start))
		return nil, err
	}
	out, err := c.h.answer(ctx, &request{"KubernetesListResourceAll", &ListAllRequest{APIVersion: r.APIVersion, Kind: r.Kind}})
	outcome := "success"
	if err != nil {
		outcome = "error"
	}
	c.h.m.observe(c.id, capName, outcome, time.Since(start))
	return out, err
}

// PluralName is the resource's plural name (v1/Service: services), which
// keys data.kubernetes: from discovery, or from the session when replaying
// (kwctl records it as KubernetesGetResourcePluralName, its answer a JSON
// string).
func (c *Cluster) PluralName(ctx context.Context, r Resource) (string, error) {
	if !c.granted[r] {
		return "", errResourceDenied(r)
	}
	out, err := c.h.answer(ctx, &request{"KubernetesGetResourcePluralName", &PluralNameRequest{APIVersion: r.APIVersion, Kind: r.Kind}})
	if err != nil {
		return "", err
	}
	var name string
	if err := json.Unmarshal(out, &name); err != nil || name == "" {
		return "", fmt.Errorf("the plural name of %s/%s is not a non-empty JSON string: %.80q", r.APIVersion, r.Kind, out)
	}
	return name, nil
}

// Version is a number that changes whenever an object of the resource is
// added, updated or deleted (its cache's informer events), so that data built
// from ListAll can be reused until it changes. ok is false when there is no
// such signal: the resource has no synced cache, or calls are recorded or
// replayed (every evaluation then lists, as kwctl records it).
func (c *Cluster) Version(r Resource) (v uint64, ok bool) {
	h := c.h
	if h.o.Replay != nil || h.o.Record != nil || h.o.Kubernetes == nil || !c.granted[r] {
		return 0, false
	}
	return h.o.Kubernetes.listVersion(r)
}

// CachesPluralNames reports whether plural names may be asked once and
// kept: not when calls are recorded or replayed (kwctl records them with
// every evaluation).
func (c *Cluster) CachesPluralNames() bool {
	return c.h.o.Replay == nil && c.h.o.Record == nil
}
