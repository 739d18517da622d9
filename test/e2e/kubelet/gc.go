package kubelet

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
)

// GCResources are the namespaced resources the garbage collector looks at: what an operator
// makes for a policy server.
var GCResources = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// GarbageCollector plays kube-controller-manager's garbage collector, which this cluster lacks,
// for GCResources in one namespace: an object whose every ownerReference names an object that
// no longer exists (or exists with another uid) is deleted, in the background, as the real one
// would. Foreground deletion (the foregroundDeletion finalizer) is not emulated.
type GarbageCollector struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Deleted receives "resource namespace/name" for every object deleted (buffered; dropped
	// when full).
	Deleted chan string
}

// StartGarbageCollector polls every interval (default 1 s) until Stop.
func StartGarbageCollector(cfg *rest.Config, namespace string, interval time.Duration, logf func(string, ...any)) (*GarbageCollector, error) {
	if interval == 0 {
		interval = time.Second
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ctx, cancel := context.WithCancel(context.Background())
	gc := &GarbageCollector{cancel: cancel, done: make(chan struct{}), Deleted: make(chan string, 100)}
	go func() {
		defer close(gc.done)
		for {
			gc.sweep(ctx, dyn, mapper, namespace, logf)
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()
	return gc, nil
}

// Stop ends the polling.
func (gc *GarbageCollector) Stop() {
	gc.cancel()
	<-gc.done
}

func (gc *GarbageCollector) sweep(ctx context.Context, dyn dynamic.Interface, mapper meta.ResettableRESTMapper, ns string, logf func(string, ...any)) {
	for _, gvr := range GCResources {
		list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, obj := range list.Items {
			owners := obj.GetOwnerReferences()
			if len(owners) == 0 || obj.GetDeletionTimestamp() != nil {
				continue
			}
			alive := false
			for _, o := range owners {
				exists, err := ownerExists(ctx, dyn, mapper, ns, o)
				if err != nil || exists {
					alive = true // when in doubt, keep it (as the real collector does)
					break
				}
			}
			if alive {
				continue
			}
			err := dyn.Resource(gvr).Namespace(ns).Delete(ctx, obj.GetName(), metav1.DeleteOptions{
				Preconditions:     &metav1.Preconditions{UID: ptr.To(obj.GetUID())},
				PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				logf("gc: deleting %s %s/%s: %v", gvr.Resource, ns, obj.GetName(), err)
				continue
			}
			what := fmt.Sprintf("%s %s/%s", gvr.Resource, ns, obj.GetName())
			logf("gc: deleted %s (owners gone)", what)
			select {
			case gc.Deleted <- what:
			default:
			}
		}
	}
}

func ownerExists(ctx context.Context, dyn dynamic.Interface, mapper meta.ResettableRESTMapper, ns string, o metav1.OwnerReference) (bool, error) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return false, err
	}
	m, err := mapper.RESTMapping(gv.WithKind(o.Kind).GroupKind(), gv.Version)
	if err != nil {
		mapper.Reset()
		if meta.IsNoMatchError(err) {
			return false, nil // the kind itself is gone (its CRD was deleted)
		}
		return false, err
	}
	ri := dyn.Resource(m.Resource)
	var getter dynamic.ResourceInterface = ri
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		getter = ri.Namespace(ns)
	}
	cur, err := getter.Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return cur.GetUID() == o.UID, nil
}
